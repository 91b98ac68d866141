"""`SandboxControl`: every fault of a running sandbox, from another process, over its `/_sandbox/` HTTP
control surface — the API server's (the emulator's `Faults`) and the simulated Longhorn's (`SimFaults`,
mounted at `/_sandbox/simulator`).

What `corral sandbox fault …` and chaos tests use against a sandbox they did not start in-process:

    control = SandboxControl.from_kubeconfig("run/sandbox/kubeconfig")
    await control.set_faults(conflict_rate=0.5)        # API: 409 on half the writes
    await control.crash_engine("pvc-1")                # data plane: kill pvc-1's engine
    await control.clear()                              # both sides back to normal
    await control.close()
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from corral_sandbox.emulator.control import EmulatorControl

SIMULATOR = "simulator"


def server_of(kubeconfig: str | os.PathLike[str]) -> str:
    """The API server URL of a kubeconfig's current context (the sandbox's URL)."""
    doc: dict[str, Any] = yaml.safe_load(Path(kubeconfig).read_text()) or {}
    contexts = {c.get("name"): c.get("context", {}) for c in doc.get("contexts") or []}
    clusters: dict[str, dict[str, Any]] = {
        c.get("name"): c.get("cluster", {}) for c in doc.get("clusters") or []
    }
    current = contexts.get(doc.get("current-context"), {})
    cluster: dict[str, Any] = clusters.get(current.get("cluster")) or next(iter(clusters.values()), {})
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise ValueError(f"{kubeconfig}: no cluster server URL in it")
    return server


class SandboxControl(EmulatorControl):
    """EmulatorControl plus the simulator's faults; each call answers the simulator's state after it."""

    @classmethod
    def from_kubeconfig(cls, kubeconfig: str | os.PathLike[str]) -> SandboxControl:
        return cls(server_of(kubeconfig))

    async def _simulator(self, action: str = "", **body: Any) -> dict[str, Any]:
        what = f"{SIMULATOR}/{action}" if action else SIMULATOR
        result: dict[str, Any] = await self.call("POST" if action else "GET", what, body if action else None)
        return result

    async def simulator_faults(self) -> dict[str, Any]:
        return await self._simulator()

    async def stall(self, *controllers: str) -> dict[str, Any]:
        return await self._simulator("stall", controllers=list(controllers))

    async def resume(self, *controllers: str) -> dict[str, Any]:
        return await self._simulator("resume", controllers=list(controllers))

    async def restart_simulator(self) -> dict[str, Any]:
        return await self._simulator("restart")

    async def crash_engine(self, volume: str) -> dict[str, Any]:
        return await self._simulator("crash-engine", volume=volume)

    async def fail_replica(self, replica: str) -> dict[str, Any]:
        return await self._simulator("fail-replica", replica=replica)

    async def set_node_ready(self, node: str, ready: bool) -> dict[str, Any]:
        return await self._simulator("node-ready", node=node, ready=ready)

    async def slow_writes(self, seconds: float) -> dict[str, Any]:
        return await self._simulator("slow-writes", seconds=seconds)

    async def restart_instance_manager_container(self, pod: str) -> dict[str, Any]:
        return await self._simulator("restart-im-container", pod=pod)

    async def hold_instance(self, instance: str) -> dict[str, Any]:
        return await self._simulator("hold-instance", instance=instance)

    async def release_instance(self, instance: str) -> dict[str, Any]:
        return await self._simulator("release-instance", instance=instance)

    async def fail_instance_manager_pod(self, pod: str) -> dict[str, Any]:
        return await self._simulator("fail-im-pod", pod=pod)

    async def instance_manager_pods(self) -> list[dict[str, Any]]:
        """Per IM: node, state, its pod (uid, phase, restartCount) and every pod uid it has had."""
        result: list[dict[str, Any]] = await self.call("GET", f"{SIMULATOR}/instance-managers", None)
        return result

    # --- SIM-V2 / SIM-IO ------------------------------------------------------------------------

    async def block_target(self, node: str) -> dict[str, Any]:
        """No v2 target can be created on `node`: a relocation there stalls (V2U-16)."""
        return await self._simulator("block-target", node=node)

    async def unblock_target(self, node: str) -> dict[str, Any]:
        return await self._simulator("unblock-target", node=node)

    async def kill_v2_instance_manager(self, node: str) -> dict[str, Any]:
        """`node`'s v2 IM pod dies and stays down until `revive_v2_instance_manager` (V2U-19)."""
        return await self._simulator("kill-v2-im", node=node)

    async def revive_v2_instance_manager(self, node: str) -> dict[str, Any]:
        return await self._simulator("revive-v2-im", node=node)

    async def set_node_images(
        self, node: str, *, add: list[str] | None = None, remove: list[str] | None = None
    ) -> dict[str, Any]:
        """The images `node` reports pulled: `remove` dropped, `add` listed (V2U-02)."""
        return await self._simulator("node-images", node=node, add=add or [], remove=remove or [])

    async def io(self) -> dict[str, Any]:
        """The SIM-IO ledger: per volume its gaps (start, end, seconds, reasons), `longestGap`,
        `detaches`, `crashDetaches`, whether it is attached and serving now (io_ledger.py)."""
        result: dict[str, Any] = await self.call("GET", "io", None)
        return result

    async def clear(self) -> dict[str, Any]:
        """Every fault off: the API server's knobs reset, the simulator's faults undone."""
        api = await self.reset_faults()
        simulator = await self._simulator("clear")
        return {"api": api, "simulator": simulator}
