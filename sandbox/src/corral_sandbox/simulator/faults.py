"""SIM-FAULT: what a scenario can do to the simulated Longhorn controllers while they run —
stall them, restart them (losing their in-memory progress), slow their writes, kill an engine
process, fail a replica, restart an instance-manager container.

API-level faults (latency, 409/429/5xx, cut watches) belong to the emulator (`emu.faults`); these are
the data-plane side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from corral_sandbox.simulator.objects import engine_name
from corral_sandbox.simulator.reconcile import CONTROLLERS

if TYPE_CHECKING:
    from corral_sandbox.simulator.runner import Simulator


class SimFaults:
    def __init__(self, simulator: Simulator) -> None:
        self._sim = simulator
        self.write_delay_seconds = 0.0

    def stall(self, *controllers: str) -> None:
        """Stop the named controllers (all when none named) from acting until `resume`."""
        names = controllers or tuple(CONTROLLERS)
        unknown = set(names) - set(CONTROLLERS)
        if unknown:
            raise ValueError(f"unknown controllers {sorted(unknown)}; known: {sorted(CONTROLLERS)}")
        self._sim.paused.update(names)

    def resume(self, *controllers: str) -> None:
        names = controllers or tuple(CONTROLLERS)
        self._sim.paused.difference_update(names)
        self._sim.wake()

    async def restart(self) -> None:
        """A controller process restart: in-memory timers are lost and the view is listed afresh."""
        await self._sim.restart()

    def crash_engine(self, volume: str) -> None:
        """SIGKILL the volume's engine process (test_engine_crash_during_live_upgrade)."""
        self._sim.memory.crash_engines.add(engine_name(volume))
        self._sim.wake()

    def fail_replica(self, replica: str) -> None:
        """The replica's process errors; the volume controller marks it failed and rebuilds."""
        self._sim.memory.fail_replicas.add(replica)
        self._sim.wake()

    def restart_instance_manager_container(self, pod: str) -> None:
        """Bump the IM pod's container restartCount, as a liveness-probe restart would."""
        obj = self._sim.view.get("pod", pod)
        if obj is None:
            raise KeyError(f"no pod {pod}")
        uid = obj["metadata"].get("uid", "")
        self._sim.memory.pod_restarts[uid] = self._sim.memory.pod_restarts.get(uid, 0) + 1
        self._sim.wake()

    async def set_node_ready(self, node: str, ready: bool) -> None:
        """Node NotReady (or Ready again): the Longhorn node's and the kube node's Ready condition,
        written through the API like the node controller and kubelet would. Its instance manager goes
        `unknown`, the instances in it fail, and volumes react (SIM-FAULT node NotReady)."""
        flag = "True" if ready else "False"
        for kind in ("node", "kubenode"):
            obj = self._sim.view.get(kind, node)
            if obj is None:
                raise KeyError(f"no {kind} {node}")
            conditions = [c for c in obj.get("status", {}).get("conditions", []) if c.get("type") != "Ready"]
            reason = "" if ready else "KubernetesNodeNotReady"
            conditions.insert(0, {"type": "Ready", "status": flag, "reason": reason})
            answer = await self._sim.io.patch(kind, node, {"status": {"conditions": conditions}}, status=True)
            self._sim.view.upsert(kind, answer)
        self._sim.wake()

    def slow_writes(self, seconds: float) -> None:
        """Every simulator write waits this long first (a slow controller, not a slow API)."""
        self.write_delay_seconds = max(0.0, seconds)
