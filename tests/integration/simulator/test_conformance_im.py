"""SIM-IM conformance through the real API and the `/_sandbox/simulator` control (the rules
themselves: tests/unit/simulator/test_conformance_im.py).

SC-IM-09 an instance held `starting` and released over HTTP, seen in the IM's instance map;
SC-IM-10 a failed IM pod over HTTP, and the ledger of pod uids and restart counts;
SC-IM-11 the disable-v2 label is refused on a node that hosts a v2 engine or replica (T4.6).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio import client

from corral_sandbox.control import SandboxControl
from corral_sandbox.simulator import SimConfig, objects
from corral_sandbox.simulator.im_nodes import DISABLE_V2_LABEL
from tests.fixtures.sandbox import Sandbox, fast_config

pytestmark = pytest.mark.integration


@pytest.fixture
def sandbox_config() -> SimConfig:
    return replace(fast_config(), im_delete_failed_pods=False)


async def _im_on(sandbox: Sandbox, node: str, engine: str = "v1") -> dict[str, Any] | None:
    for im in await sandbox.list("instancemanagers"):
        if im["spec"]["nodeID"] == node and im["spec"]["dataEngine"] == engine:
            return im
    return None


async def test_sc_im_09_an_instance_held_starting(sandbox: Sandbox, control: SandboxControl) -> None:
    engine = objects.engine_name("vol-h")
    state = await control.hold_instance(engine)
    assert state["heldInstances"] == [engine]
    await sandbox.create_volume("vol-h", replicas=1, node="node-1")

    async def starting_in_its_im() -> bool:
        im = await _im_on(sandbox, "node-1")
        engines = (im or {}).get("status", {}).get("instanceEngines") or {}
        return bool(engines.get(engine, {}).get("status", {}).get("state") == "starting")

    await sandbox.wait_for(starting_in_its_im, what="the engine starting in node-1's IM")
    await sandbox.stays(starting_in_its_im, 0.3, what="held in starting")
    assert (await control.release_instance(engine))["heldInstances"] == []
    await sandbox.wait_volume("vol-h", lambda v: v.get("status", {}).get("state") == "attached")
    with pytest.raises(RuntimeError, match="400"):
        await control.hold_instance("")


async def test_sc_im_10_a_failed_im_pod_and_the_pod_ledger(sandbox: Sandbox, control: SandboxControl) -> None:
    im = await _im_on(sandbox, "node-2")
    assert im is not None
    name = im["metadata"]["name"]
    pod = await sandbox.core.read_namespaced_pod(name, sandbox.namespace)
    await control.fail_instance_manager_pod(name)

    async def in_error() -> bool:
        current = await sandbox.get("instancemanagers", name)
        return bool(current["status"].get("currentState") == "error")

    await sandbox.wait_for(in_error, what="the IM in error")
    failed = await sandbox.core.read_namespaced_pod(name, sandbox.namespace)
    assert failed.status.phase == "Failed" and failed.metadata.uid == pod.metadata.uid
    await sandbox.core.delete_namespaced_pod(name, sandbox.namespace)

    async def replaced() -> dict[str, Any] | None:
        entry = next(e for e in await control.instance_manager_pods() if e["name"] == name)
        running = entry["pod"] is not None and entry["pod"]["phase"] == "Running"
        return entry if running and entry["recreations"] == 1 else None

    entry = await sandbox.wait_for(replaced, what="a new pod in the ledger")
    assert entry["podUIDs"][0] == pod.metadata.uid and entry["pod"]["restartCount"] == 0
    await control.restart_instance_manager_container(name)

    async def restarted() -> bool:
        entry = next(e for e in await control.instance_manager_pods() if e["name"] == name)
        return bool(entry["pod"]["restartCount"] == 1)

    await sandbox.wait_for(restarted, what="the container restart counted")
    with pytest.raises(RuntimeError, match="404"):
        await control.fail_instance_manager_pod("no-such-pod")


async def test_sc_im_11_disabling_v2_on_a_node_with_a_v2_replica_is_refused(sandbox: Sandbox) -> None:
    for node in ("node-1", "node-2", "node-3"):
        await sandbox.set_hugepages(node, "2Gi")  # what Longhorn's webhook asks to enable v2
    await sandbox.set_setting("v2-data-engine", "true")

    async def v2_running() -> bool:
        im = await _im_on(sandbox, "node-1", "v2")
        return im is not None and im.get("status", {}).get("currentState") == "running"

    await sandbox.wait_for(v2_running, what="node-1's v2 IM running")
    im_image = (await sandbox.get("settings", "default-instance-manager-image"))["value"]
    body = objects.volume("vol-v2", sandbox.namespace, image=im_image, replicas=1, data_engine="v2")
    await sandbox.create("volumes", body)

    async def replica_node() -> str:
        replicas = await sandbox.replicas_of("vol-v2")
        return str(replicas[0]["spec"]["nodeID"]) if replicas and replicas[0]["spec"]["nodeID"] else ""

    node = await sandbox.wait_for(replica_node, what="the v2 replica placed")
    label = {"metadata": {"labels": {DISABLE_V2_LABEL: "true"}}}
    with pytest.raises(client.ApiException) as refused:
        await sandbox.core.patch_node(node, label)
    assert refused.value.status == 400 and "cannot disable v2 data engine" in str(refused.value.body)
    other = next(n for n in ("node-1", "node-2", "node-3") if n != node)
    await sandbox.core.patch_node(other, label)  # no v2 instance there: allowed

    async def v2_gone() -> bool:
        return await _im_on(sandbox, other, "v2") is None

    await sandbox.wait_for(v2_gone, what=f"the idle v2 IM on {other} removed")
    assert await _im_on(sandbox, other, "v1") is not None
