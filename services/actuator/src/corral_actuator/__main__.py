"""`python -m corral_actuator [--dry-run]`: run the actuator service (configuration from CORRAL_* env)."""

from __future__ import annotations

import argparse
import os
import sys

from corral_actuator.config import ActuatorConfig
from corral_actuator.gate import actuator_gate
from corral_actuator.runner import main as actuator_main
from corral_runtime.service import run_service


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="corral-actuator", description=__doc__)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="send every write with dryRun=All (validated by the API server, stored nowhere); "
        "same as CORRAL_DRY_RUN=true",
    )
    args = parser.parse_args(argv)
    environ = dict(os.environ)
    if args.dry_run:
        environ["CORRAL_DRY_RUN"] = "true"
    return run_service(
        "actuator",
        ActuatorConfig,
        actuator_main,
        leader_election=True,
        ready_when=["policy"],
        # The bus view depends on the actuator, so it reads the gate's inputs live, and as the only
        # writer it records its own gate Events (corral_actuator.gate).
        startup=[actuator_gate],
        environ=environ,
    )


if __name__ == "__main__":
    sys.exit(main())
