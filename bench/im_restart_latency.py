"""How soon an instance manager that turns idle with unsynced settings loses its pod, in the sandbox
(issue 14: p99 <= 1 s; Longhorn notices at its 30 s IM informer resync).

The real path runs in this process as the im-restart scenarios run it (tests/scenarios/im_restart):
sandbox → watcher → LH_OBJECTS → im-restart (at its deployed `debounce_s`) → LH_COMMANDS → actuator
→ the emulator. One run: a volume attached on node-1 keeps node-1's IM busy; a danger-zone setting
changes (`priority-class`, another built-in PriorityClass each run) and im-restart marks the IM
SettingSynced=False; the volume detaches; its engine and replica stop; the simulated IM controller
empties the IM's instance maps; im-restart deletes the pod. Measured from the commit of the last of the IM's
instances going `stopped` to the commit of the pod's delete, both taken inside the API server by
admission hooks that never refuse (so no watch or poll delay is counted). Then the next run waits
for the replacement pod to run.

Everything (sandbox included) shares one event loop here, so the figures carry this process's
scheduling delays too; load average and the host-speed calibration are recorded beside them.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from bench.applied_after_detach import CLASSES
from bench.bench_engine_upgrade import calibration_ns
from bench.wave_stack import deployed_debounce_s
from corral_bus import connect, ensure_streams
from corral_im_restart.service import DEFINITION
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import default_seed, resized
from corral_sandbox.simulator import objects
from tests.fixtures.nats import BinaryNats
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import fast_config
from tests.fixtures.services import decision_replica
from tests.scenarios.engine_upgrade.conftest import actuator
from tests.scenarios.im_restart.conftest import watcher

RUNS = 50
RESYNC_S = 30.0  # Longhorn's IM informer resync: its bound when no event wakes the controller
STEP_TIMEOUT_S = 30.0
LONGHORN = "longhorn.io"
ACTIVE = ("running", "starting")
DEPLOYED_DEBOUNCE_S = deployed_debounce_s(DEFINITION)


class Stopwatch:
    """Admission hooks timing, per IM, its last instance's stop and its pod's delete."""

    def __init__(self) -> None:
        self.last_stop: dict[str, float] = {}
        self.deleted: dict[str, float] = {}

    def instance(self, operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if operation != "UPDATE" or old is None or new is None:
            return
        before, after = old.get("status") or {}, new.get("status") or {}
        if before.get("currentState") in ACTIVE and after.get("currentState") == "stopped":
            manager = before.get("instanceManagerName", "")
            if manager:
                self.last_stop[manager] = time.perf_counter()

    def pod(self, operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if operation == "DELETE" and old is not None and not old["metadata"].get("deletionTimestamp"):
            self.deleted.setdefault(old["metadata"]["name"], time.perf_counter())


async def _until(probe: Any, what: str) -> Any:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while True:
        found = await probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {STEP_TIMEOUT_S}s for {what}")
        await asyncio.sleep(0.005)


async def measure(runs: int = RUNS) -> dict[str, Any]:
    seed = resized(default_seed(), nodes=3, volumes=0)
    config = fast_config(im_delete_failed_pods=False)
    load_before, calibration_before = os.getloadavg()[0], calibration_ns()
    nats = BinaryNats()
    nats.start()
    latencies: list[float] = []
    try:
        bus = await connect(nats.url, name="bench-im-restart")
        await ensure_streams(bus.js)
        async with SandboxCluster(seed, sim_config=config) as cluster:
            emulator, ns = cluster.emulator, seed.namespace
            watch = Stopwatch()
            for plural in ("engines", "replicas"):
                emulator.register_admission(LONGHORN, plural, watch.instance, include_status=True)
            emulator.register_admission("", "pods", watch.pod)
            kubeconfig = str(cluster.kubeconfig_path)
            stack = [
                watcher(kubeconfig, nats.url),
                actuator(kubeconfig, nats.url),
                decision_replica(DEFINITION, nats.url, "imr-1", handover_delay_s=0.0),
            ]
            try:
                await eventually(lambda: all(s.ready for s in stack), within=120, what="the stack to lead")
                for run in range(runs):
                    latencies.append(await one_run(cluster, ns, watch, run))
            finally:
                for service in reversed(stack):
                    await service.stop()
        await bus.close()
    finally:
        nats.stop()
    ordered = sorted(latencies)
    return {
        "idle_to_delete_ms": {
            "p50": round(statistics.median(ordered) * 1000, 1),
            "p99": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 1),
            "max": round(ordered[-1] * 1000, 1),
            "runs": len(ordered),
        },
        "idle_to_delete_longhorn_bound_s": RESYNC_S,
        "idle_to_delete_debounce_s": DEPLOYED_DEBOUNCE_S,
        "idle_to_delete_load_average_1m_before": round(load_before, 2),
        "idle_to_delete_load_average_1m_after": round(os.getloadavg()[0], 2),
        "idle_to_delete_calibration_empty_call_ns_before": round(calibration_before, 1),
        "idle_to_delete_calibration_empty_call_ns_after": round(calibration_ns(), 1),
    }


async def one_run(cluster: SandboxCluster, ns: str, watch: Stopwatch, run: int) -> float:
    emulator = cluster.emulator

    def node_one_im() -> dict[str, Any] | None:
        for im in emulator.list(LONGHORN, "instancemanagers", ns):
            if im["spec"]["nodeID"] == "node-1" and im["spec"]["dataEngine"] == "v1":
                return im
        return None

    async def im_running() -> dict[str, Any] | None:
        im = node_one_im()
        pod = emulator.get("", "pods", ns, im["metadata"]["name"]) if im else None
        ok = im and pod and im.get("status", {}).get("currentState") == "running"
        return im if ok and (pod or {}).get("status", {}).get("phase") == "Running" else None

    im = await _until(im_running, "node-1's IM running")
    name = im["metadata"]["name"]
    volume = f"lat-{run}"
    body = objects.volume(volume, ns, image=cluster.seed.default_engine_image, replicas=1, node_id="node-1")
    await cluster.simulator.io.create("volume", body)

    async def busy() -> bool:
        current = emulator.get(LONGHORN, "instancemanagers", ns, name) or {}
        engines = current.get("status", {}).get("instanceEngines") or {}
        return objects.engine_name(volume) in engines

    await _until(busy, f"{volume}'s engine in {name}")
    # A new value per run, among the PriorityClasses every cluster has (the webhook refuses others).
    await cluster.simulator.io.patch("setting", "priority-class", {"value": CLASSES[run % len(CLASSES)]})

    async def judged() -> bool:
        current = emulator.get(LONGHORN, "instancemanagers", ns, name) or {}
        conditions = current.get("status", {}).get("conditions") or []
        return any(c.get("type") == "SettingSynced" and c.get("status") == "False" for c in conditions)

    await _until(judged, f"{name} SettingSynced=False while busy")
    watch.last_stop.pop(name, None)
    watch.deleted.pop(name, None)
    await cluster.simulator.io.patch("volume", volume, {"spec": {"nodeID": ""}})
    await _until(lambda: _deleted(watch, name), f"{name}'s pod deleted")
    latency = watch.deleted[name] - watch.last_stop[name]
    await cluster.simulator.io.delete("volume", volume)
    return latency


async def _deleted(watch: Stopwatch, name: str) -> bool:
    return name in watch.deleted and name in watch.last_stop
