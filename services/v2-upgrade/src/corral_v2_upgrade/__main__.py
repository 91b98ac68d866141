"""`python -m corral_v2_upgrade`: the v2-upgrade decision service on the kit's runner
(configuration from CORRAL_* variables; see service.V2UpgradeConfig)."""

from __future__ import annotations

from corral_decision import run
from corral_v2_upgrade.service import DEFINITION

if __name__ == "__main__":
    raise SystemExit(run(DEFINITION))
