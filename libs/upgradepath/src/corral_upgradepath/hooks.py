"""The upgrade-path gate as the start-up hook a service registers with the runtime harness.

Every corral service refuses to run against a cluster whose Longhorn version this build may not be
upgraded from. Decision services have no API credentials, so they decide from the view the watcher
publishes on the bus (`bus_gate`); the watcher and the actuator, which the bus view depends on, read
the same two inputs live (`live_gate`). Either way a blocked path ends the service with exit code 1
before its main runs, so it never issues a command.

`live_gate` needs a Kubernetes client: `corral-upgradepath[live]` brings it, and it is imported only
when the hook runs, so a service that registers `bus_gate` carries no Kubernetes client at all.
"""

from __future__ import annotations

from corral_bus.connection import Bus
from corral_runtime.config import ServiceConfig
from corral_upgradepath.busgate import enforce_live_startup_gate, enforce_startup_gate
from corral_upgradepath.decision import GateDecision


async def bus_gate(bus: Bus, config: ServiceConfig) -> GateDecision:
    """Decide from LH_OBJECTS (the watcher's view) and ask the actuator to record the Event."""
    return await enforce_startup_gate(
        bus,
        service=config.service,
        namespace=config.namespace,
        version_check=config.upgrade_version_check,
        wait_s=config.upgrade_gate_wait_s,
    )


async def live_gate(bus: Bus, config: ServiceConfig) -> GateDecision:
    """Decide from a live, read-only read of the API server (watcher and actuator only).

    Reads the kubeconfig from the service's own `kubeconfig` setting (both services have one);
    empty means $KUBECONFIG, then the in-cluster service account.
    """
    from corral_kube.client import connected  # the `live` extra: only the watcher and actuator

    kubeconfig = str(getattr(config, "kubeconfig", "") or "") or None
    async with connected(kubeconfig) as api:
        return await enforce_live_startup_gate(
            bus,
            api,
            service=config.service,
            namespace=config.namespace,
            version_check=config.upgrade_version_check,
        )
