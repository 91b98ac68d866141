"""A running sandbox's faults from another process: the `/_sandbox/` control API (`SandboxControl`,
the emulator's endpoints plus the simulator's mounted at `/_sandbox/simulator`) reached only through
the URL in the sandbox's kubeconfig, as a chaos test or `corral sandbox fault` reaches one started by
`corral sandbox up`."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from corral_sandbox.control import SandboxControl
from corral_sandbox.simulator import objects
from tests.fixtures.sandbox import Sandbox
from tests.integration.simulator.test_conformance import attached_healthy, attached_volume, detached


def ready(node: dict[str, Any]) -> str:
    return str(next(c["status"] for c in node["status"]["conditions"] if c["type"] == "Ready"))


async def test_an_engine_crash_through_the_control_api(sandbox: Sandbox, control: SandboxControl) -> None:
    """`POST /_sandbox/simulator/crash-engine`: the engine dies, the volume detaches, asks for a remount
    and comes back attached and healthy (SIM-CRASH), as with `sandbox.simulator.faults.crash_engine`."""
    await attached_volume(sandbox, "vol-c", replicas=2)
    async with sandbox.recording("engines", objects.engine_name("vol-c")) as seen:
        state = await control.crash_engine("vol-c")
        assert state["enginesToCrash"] == ["vol-c-e-0"]
        await sandbox.wait_recorded(seen, lambda e: e["status"].get("currentState") == "error")
    await sandbox.wait_volume(
        "vol-c",
        lambda v: attached_healthy(v) and bool(v["status"].get("remountRequestedAt")),
        what="reattached after the crash",
    )
    assert (await control.simulator_faults())["enginesToCrash"] == [], "carried out, then forgotten"
    with pytest.raises(RuntimeError, match="404"):
        await control.crash_engine("no-such-volume")
    with pytest.raises(RuntimeError, match="400"):
        await control.stall("no-such-controller")


async def test_api_faults_and_held_faults_through_the_control_api_then_clear(
    sandbox: Sandbox, control: SandboxControl
) -> None:
    """409 on every volume write, a stalled volume controller and a NotReady node, set over HTTP and
    seen through the Kubernetes API; `clear` undoes all of them."""
    await sandbox.create_volume("vol-f", replicas=2)
    await sandbox.wait_volume("vol-f", detached)
    await control.set_faults(conflict_rate=1.0, plurals=["volumes"])
    with pytest.raises(client.ApiException) as refused:
        await sandbox.patch("volumes", "vol-f", {"spec": {"numberOfReplicas": 3}})
    assert refused.value.status == 409

    await control.stall("volume")
    state = await control.set_node_ready("node-3", False)
    assert state["stalled"] == ["volume"] and state["notReadyNodes"] == ["node-3"]
    assert ready(await sandbox.get("nodes", "node-3")) == "False"

    cleared = await control.clear()
    assert cleared["api"]["conflict_rate"] == 0 and cleared["api"]["plurals"] == []
    assert cleared["simulator"]["stalled"] == [] and cleared["simulator"]["notReadyNodes"] == []
    assert ready(await sandbox.get("nodes", "node-3")) == "True"
    await sandbox.patch("volumes", "vol-f", {"spec": {"numberOfReplicas": 3}})

    async def three_replicas() -> bool:
        return len(await sandbox.replicas_of("vol-f")) == 3

    await sandbox.wait_for(three_replicas, what="the volume controller acts again")
