"""`python -m corral_engine_upgrade`: the engine-upgrade decision service on the kit's runner
(configuration from CORRAL_* variables; see service.EngineUpgradeConfig)."""

from __future__ import annotations

from corral_decision import run
from corral_engine_upgrade.service import DEFINITION

if __name__ == "__main__":
    raise SystemExit(run(DEFINITION))
