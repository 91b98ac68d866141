"""A corral service reduced to its start-up gate, run under the real service harness.

This is the wiring every service gets (the runtime harness calls the gate before `main`): decide
from the bus, ask the actuator for the Event, and on a blocked path fail before acting, so the
harness exits 1. The sandbox test runs it as its own process, as Kubernetes would run a pod.
"""

from __future__ import annotations

import os

from corral_runtime import ServiceConfig, ServiceContext, run_service
from corral_upgradepath.busgate import enforce_startup_gate
from corral_upgradepath.startup import version_check_from_env


class UpgradePathBlocked(RuntimeError):
    pass


async def main(ctx: ServiceContext[ServiceConfig]) -> None:
    decision = await enforce_startup_gate(
        ctx.bus,
        service=ctx.name,
        namespace=ctx.config.namespace,
        version_check=version_check_from_env(os.environ),
        wait_s=60,
    )
    print(decision.summary(), flush=True)
    if decision.blocked:
        raise UpgradePathBlocked(decision.reason)


if __name__ == "__main__":
    raise SystemExit(run_service(os.environ.get("GATED_SERVICE_NAME", "engine-upgrade"), ServiceConfig, main))
