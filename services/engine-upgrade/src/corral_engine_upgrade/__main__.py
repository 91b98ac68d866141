"""`python -m corral_engine_upgrade`: the engine-upgrade decision service under the runtime harness
(configuration from CORRAL_* variables; see runner.EngineUpgradeConfig)."""

from __future__ import annotations

from corral_engine_upgrade.runner import BOOTSTRAP, EngineUpgradeConfig, main
from corral_runtime import run_service
from corral_runtime.gate import bus_gate

if __name__ == "__main__":
    raise SystemExit(
        run_service(
            "engine-upgrade",
            EngineUpgradeConfig,
            main,
            leader_election=True,
            ready_when=[BOOTSTRAP],
            # Decided from the watcher's view on the bus: this service holds no API credentials.
            upgrade_gate=bus_gate,
        )
    )
