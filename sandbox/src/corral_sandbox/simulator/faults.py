"""SIM-FAULT: what a scenario can do to the simulated Longhorn controllers while they run —
stall them, restart them (losing their in-memory progress), slow their writes, kill an engine
process, fail a replica, restart an instance-manager container.

API-level faults (latency, 409/429/5xx, cut watches) belong to the emulator (`emu.faults`); these are
the data-plane side. Both are reachable from another process through `/_sandbox/` (control.py here,
the emulator's control.py there), and `clear()` undoes every fault held here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kubernetes_asyncio import client

from corral_sandbox.simulator.clock import timestamp
from corral_sandbox.simulator.conditions import condition
from corral_sandbox.simulator.node_images import image_entry, node_image_names
from corral_sandbox.simulator.objects import engine_name
from corral_sandbox.simulator.reconcile import CONTROLLERS

if TYPE_CHECKING:
    from corral_sandbox.simulator.runner import Simulator


# API answers that say "try again": the emulator's injected faults among them
_TRANSIENT = {409, 429, 500, 503}
_NODE_WRITE_SECONDS = 10.0
_RETRY_SECONDS = 0.05


class SimFaults:
    def __init__(self, simulator: Simulator) -> None:
        self._sim = simulator
        self.write_delay_seconds = 0.0
        # nodes made NotReady here, so `clear()` knows which to bring back
        self.not_ready: set[str] = set()

    def state(self) -> dict[str, Any]:
        """What is held now (for `GET /_sandbox/simulator` and `corral sandbox fault show`)."""
        memory = self._sim.memory
        return {
            "stalled": sorted(self._sim.paused),
            "slowWritesSeconds": self.write_delay_seconds,
            "notReadyNodes": sorted(self.not_ready),
            "enginesToCrash": sorted(memory.crash_engines),
            "replicasToFail": sorted(memory.fail_replicas),
            "heldInstances": sorted(memory.held_instances),
            "instanceManagerPodsToFail": sorted(memory.fail_im_pods),
            "blockedTargetNodes": sorted(memory.blocked_targets),
            "v2InstanceManagersDown": sorted(memory.v2_im_down),
        }

    async def clear(self) -> None:
        """Undo every fault held here: controllers resumed, writes at full speed, nodes Ready again,
        crashes not yet carried out dropped. (What a fault already did — a crashed engine, a failed
        replica — the simulated controllers repair as Longhorn would.)"""
        self.write_delay_seconds = 0.0
        self._sim.memory.crash_engines.clear()
        self._sim.memory.fail_replicas.clear()
        self._sim.memory.held_instances.clear()
        self._sim.memory.fail_im_pods.clear()
        self._sim.memory.blocked_targets.clear()
        self._sim.memory.v2_im_down.clear()
        for node in sorted(self.not_ready):
            await self.set_node_ready(node, True)
        self.resume()

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

    def hold_instance(self, name: str) -> None:
        """Keep the engine or replica `name` in `starting` (an instance whose process is slow to
        come up) until `release_instance`: IM-02's busy-while-starting window, as long as a test
        needs it. One not yet created is held from its creation."""
        self._sim.memory.held_instances.add(name)
        self._sim.wake()

    def release_instance(self, name: str) -> None:
        """Let a held instance finish starting (at once if it has waited its start time)."""
        self._sim.memory.held_instances.discard(name)
        self._sim.wake()

    def fail_instance_manager_pod(self, pod: str) -> None:
        """The IM pod's container exits: phase Failed, the IM goes `error` (IM-04). Whether the
        simulated IM controller deletes the pod is `SimConfig.im_delete_failed_pods`."""
        obj = self._sim.view.get("pod", pod)
        if obj is None:
            raise KeyError(f"no pod {pod}")
        self._sim.memory.fail_im_pods[pod] = obj["metadata"].get("uid", "")
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
        `unknown`, so do the instances in it (an engine elsewhere fails its replicas there), and
        volumes react (SIM-FAULT node NotReady).

        A fault is the one write here that must not be lost: one the API server refuses (injected
        409/429/500) is tried again, for up to `_NODE_WRITE_SECONDS`."""
        flag = "True" if ready else "False"
        for kind in ("node", "kubenode"):
            if self._sim.view.get(kind, node) is None:
                raise KeyError(f"no {kind} {node}")
        for kind in ("node", "kubenode"):
            await self._write_ready(kind, node, flag, "" if ready else "KubernetesNodeNotReady")
        if ready:
            self.not_ready.discard(node)
        else:
            self.not_ready.add(node)
        self._sim.wake()

    async def _write_ready(self, kind: str, node: str, flag: str, reason: str) -> None:
        deadline = asyncio.get_running_loop().time() + _NODE_WRITE_SECONDS
        while True:
            obj = self._sim.view.get(kind, node)
            if obj is None:
                raise KeyError(f"no {kind} {node}")
            held = obj.get("status", {}).get("conditions") or []
            conditions = [c for c in held if c.get("type") != "Ready"]
            if kind == "node":  # Longhorn's condition shape; the kube node's is kubelet's
                stamp = timestamp(self._sim.clock)
                conditions.insert(0, condition(held, "Ready", flag, reason=reason, stamp=stamp))
            else:
                conditions.insert(0, {"type": "Ready", "status": flag, "reason": reason})
            try:
                answer = await self._sim.io.patch(
                    kind, node, {"status": {"conditions": conditions}}, status=True
                )
            except client.ApiException as error:
                if error.status not in _TRANSIENT or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            self._sim.view.upsert(kind, answer)
            return

    # --- SIM-V2 ---------------------------------------------------------------------------------

    def _known_node(self, node: str) -> None:
        if self._sim.view.get("node", node) is None:
            raise KeyError(f"no node {node}")

    def block_target(self, node: str) -> None:
        """SIM-FAULT stall: no v2 engine target can be created on `node` (a relocation there hangs
        before the initiator is suspended, V2U-16) until `unblock_target`."""
        self._known_node(node)
        self._sim.memory.blocked_targets.add(node)
        self._sim.wake()

    def unblock_target(self, node: str) -> None:
        self._sim.memory.blocked_targets.discard(node)
        self._sim.wake()

    def kill_v2_instance_manager(self, node: str) -> None:
        """SIM-CRASH: the node's v2 IM pod dies and stays down (IM `error`, no new pod) until
        `revive_v2_instance_manager`: the instances in it fail, and targets there stop serving (V2U-19)."""
        self._known_node(node)
        self._sim.memory.v2_im_down.add(node)
        self._sim.wake()

    def revive_v2_instance_manager(self, node: str) -> None:
        self._sim.memory.v2_im_down.discard(node)
        self._sim.wake()

    async def set_node_images(
        self, node: str, *, add: Sequence[str] = (), remove: Sequence[str] = ()
    ) -> list[str]:
        """The images the kube node reports pulled (`status.images`): `remove` dropped, `add` listed
        (V2U-02's "image missing from a node"). Returns the names listed afterwards."""
        deadline = asyncio.get_running_loop().time() + _NODE_WRITE_SECONDS
        while True:
            obj = self._sim.view.get("kubenode", node)
            if obj is None:
                raise KeyError(f"no kubenode {node}")
            held = [e for e in obj.get("status", {}).get("images", []) or [] if isinstance(e, dict)]
            kept = [e for e in held if not set(e.get("names", []) or []) & set(remove)]
            names = {n for e in kept for n in e.get("names", []) or []}
            kept += [image_entry(i) for i in add if i not in names]
            try:
                answer = await self._sim.io.patch("kubenode", node, {"status": {"images": kept}}, status=True)
            except client.ApiException as error:
                if error.status not in _TRANSIENT or asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            self._sim.view.upsert("kubenode", answer)
            self._sim.wake()
            return node_image_names(answer)

    def slow_writes(self, seconds: float) -> None:
        """Every simulator write waits this long first (a slow controller, not a slow API)."""
        self.write_delay_seconds = max(0.0, seconds)
