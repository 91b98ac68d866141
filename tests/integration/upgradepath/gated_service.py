"""A corral service reduced to its start-up gate, run under the real service harness.

This is the wiring every service gets: `run_service(..., startup=[bus_gate])` decides from the
bus and asks the actuator for the Event before `main` runs; on a blocked path the harness exits 1
and `main` never acts. The sandbox test runs it as its own process, as Kubernetes would run a pod.
"""

from __future__ import annotations

import os

from corral_runtime import ServiceConfig, ServiceContext, run_service
from corral_upgradepath.hooks import bus_gate, live_gate


class GatedConfig(ServiceConfig, frozen=True, kw_only=True):
    kubeconfig: str = ""


async def main(ctx: ServiceContext[GatedConfig]) -> None:
    # Reached only when the gate allowed the upgrade path.
    print("gated service acting", flush=True)


if __name__ == "__main__":
    name = os.environ.get("GATED_SERVICE_NAME", "engine-upgrade")
    # GATED_SERVICE_GATE=live plays the watcher's and actuator's gate (a live read-only read).
    gate = live_gate if os.environ.get("GATED_SERVICE_GATE") == "live" else bus_gate
    raise SystemExit(run_service(name, GatedConfig, main, startup=[gate]))
