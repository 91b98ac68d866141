"""`python -m corral_setting_sync`: the setting-sync decision service on the kit's runner
(configuration from CORRAL_* variables; see service.SettingSyncConfig)."""

from __future__ import annotations

from corral_decision import run
from corral_setting_sync.service import DEFINITION

if __name__ == "__main__":
    raise SystemExit(run(DEFINITION))
