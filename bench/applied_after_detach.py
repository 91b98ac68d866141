"""Time from the last volume detaching to `applied=true` for a group-A setting, in the sandbox
(issue 13: p99 <= 2 s), beside Longhorn's bound.

The real path runs in this process as the scenario tests run it (tests/scenarios/setting_sync_pending/
conftest.py): sandbox -> watcher -> LH_OBJECTS -> setting-sync -> LH_COMMANDS -> actuator -> the
emulator, and the simulator recreating the instance-manager pods setting-sync deletes. Each run:
`priority-class` gets a new value while one volume is attached (setting-sync writes applied=false),
the volume is detached, and the run measures from the commit that turned the volume `detached` to
the commit that turned the Setting's `status.applied` true, both read from the emulator's own
commit record (wave_timeline's history), so no watch delay is measured. Then the volume reattaches
for the next run.

Longhorn's bound: its setting controller retries an unapplied setting 3 times (rate-limited) and
then drops it until the setting informer's hourly resync or an unrelated event, so after the last
detach `applied` can stay false for up to an hour (`longhorn_bound_s`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from bench.wave_stack import deployed_debounce_s
from bench.wave_timeline import _changes
from corral_bus import connect, ensure_streams
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import default_seed, resized
from corral_setting_sync.service import DEFINITION
from tests.fixtures.nats import BinaryNats
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import actuator
from tests.scenarios.setting_sync_pending.conftest import setting_sync, watcher

RUNS = 20
VOLUME, NODE = "pvc-bench", "node-1"
SETTING = "priority-class"
CLASSES = ("system-cluster-critical", "system-node-critical")
"""Alternated: the built-in PriorityClasses, which exist in every cluster (a webhook refuses others)."""
LONGHORN_BOUND_S = 3600.0
STEP_TIMEOUT_S = 60.0
DEPLOYED_DEBOUNCE_S = deployed_debounce_s(DEFINITION)  # the service as deployed


async def _state(sandbox: Sandbox, state: str) -> None:
    await sandbox.wait_volume(
        VOLUME, lambda v: (v.get("status") or {}).get("state") == state, within=STEP_TIMEOUT_S
    )


async def _applied(sandbox: Sandbox, value: str, applied: bool) -> None:
    async def probe() -> bool:
        s = await sandbox.get("settings", SETTING)
        return s.get("value") == value and (s.get("status") or {}).get("applied") is applied

    await sandbox.wait_for(probe, within=STEP_TIMEOUT_S, what=f"{SETTING}={value} applied={applied}")


def _last_commit(sandbox: Sandbox, plural: str, name: str, moved: Any) -> float:
    """When `name` last changed the way `moved(before, after)` says (the emulator's commit time)."""
    found = [
        at
        for at, before, after in _changes(sandbox.emulator, plural, sandbox.namespace)
        if after["metadata"]["name"] == name and moved(before, after)
    ]
    if not found:
        raise RuntimeError(f"no such change of {plural}/{name} in the emulator's history")
    return found[-1]


def _status(obj: Any, field: str) -> Any:
    return (obj.get("status") or {}).get(field)


async def measure(runs: int = RUNS) -> dict[str, Any]:
    from corral_kube.client import api_client

    seed = resized(default_seed(), nodes=3, volumes=0)
    nats = BinaryNats()
    nats.start()
    load_before = os.getloadavg()[0]
    samples: list[float] = []
    try:
        bus = await connect(nats.url, name="bench-setting-sync")
        await ensure_streams(bus.js)
        async with SandboxCluster(seed, sim_config=fast_config()) as cluster:
            kubeconfig = str(cluster.kubeconfig_path)
            api = await api_client(kubeconfig)
            sandbox = Sandbox(cluster, api, seed.namespace)
            stack = [
                watcher(kubeconfig, nats.url),
                actuator(kubeconfig, nats.url),
                setting_sync(nats.url, debounce_s=DEPLOYED_DEBOUNCE_S),
            ]
            try:
                await eventually(lambda: all(s.ready for s in stack), within=120, what="the stack to lead")
                await sandbox.create_volume(VOLUME, node=NODE)
                await _state(sandbox, "attached")
                for run in range(runs):
                    value = CLASSES[run % len(CLASSES)]
                    await sandbox.set_setting(SETTING, value)
                    await _applied(sandbox, value, False)
                    await sandbox.patch("volumes", VOLUME, {"spec": {"nodeID": ""}})
                    await _applied(sandbox, value, True)
                    detached = _last_commit(
                        sandbox,
                        "volumes",
                        VOLUME,
                        lambda b, a: _status(a, "state") == "detached" and _status(b, "state") != "detached",
                    )
                    applied = _last_commit(
                        sandbox,
                        "settings",
                        SETTING,
                        lambda b, a, v=value: (
                            a.get("value") == v
                            and _status(a, "applied") is True
                            and _status(b, "applied") is not True
                        ),
                    )
                    samples.append((applied - detached) * 1000)
                    await sandbox.patch("volumes", VOLUME, {"spec": {"nodeID": NODE}})
                    await _state(sandbox, "attached")
            finally:
                for service in reversed(stack):
                    await service.stop()
                await api.close()
        await bus.close()
    finally:
        nats.stop()
    ordered = sorted(samples)
    return {
        "applied_after_detach_runs": len(samples),
        "applied_after_detach_ms_p50": round(statistics.median(ordered), 1),
        "applied_after_detach_ms_p99": round(
            ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))], 1
        ),
        "applied_after_detach_ms_max": round(ordered[-1], 1),
        "applied_after_detach_ms": [round(s, 1) for s in samples],
        "longhorn_bound_s": LONGHORN_BOUND_S,
        "longhorn_note": (
            "Longhorn retries an unapplied setting 3 times, then drops it until the setting informer's"
            " hourly resync or an unrelated event: applied=false for up to an hour after the last detach"
        ),
        "debounce_s": DEPLOYED_DEBOUNCE_S,
        "sandbox_load_average_1m_before": round(load_before, 2),
        "sandbox_load_average_1m_after": round(os.getloadavg()[0], 2),
        "sandbox_measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    print(asyncio.run(measure()))


if __name__ == "__main__":
    main()
