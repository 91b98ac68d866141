"""SIM-V2 / SIM-IO conformance through the real API and the HTTP control (the rules themselves, round
by round on manual time: tests/unit/simulator/test_conformance_v2.py).

SC-V2-13 a NodeDataEngineUpgrade created through the API raises the node's condition, and a
switch-over written as the actuator writes it (a merge patch of the volume's spec) completes with
the frontend fixed, read back from `GET /_sandbox/io`; SC-V2-14 the v2 faults and the node images
over HTTP, with 404/400 for an unknown node or a bad body.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from corral_sandbox.control import SandboxControl
from corral_sandbox.seeds import Seed
from corral_sandbox.seeds.v2 import v2_seed
from corral_sandbox.simulator import SimConfig, objects
from corral_sandbox.simulator.node_images import node_image_names
from tests.fixtures.sandbox import Sandbox, fast_config

pytestmark = pytest.mark.integration

NEW = "longhornio/longhorn-instance-manager:v1.11.0"


@pytest.fixture
def sandbox_seed() -> Seed:
    return v2_seed(nodes=3, volumes=1)


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config()


def _condition(node: dict[str, Any], kind: str) -> str:
    return next((c["status"] for c in node["status"].get("conditions") or [] if c["type"] == kind), "")


async def test_sc_v2_13_a_switch_over_through_the_api_read_from_the_io_ledger(
    sandbox: Sandbox, control: SandboxControl
) -> None:
    await sandbox.set_setting("default-instance-manager-image", NEW)
    upgrade = objects.node_data_engine_upgrade("mgr-node-1-1", sandbox.namespace, node="node-1", image=NEW)
    await sandbox.objects_api.create_namespaced_custom_object(
        "corral.longhorn.io", "v1alpha1", sandbox.namespace, "nodedataengineupgrades", upgrade
    )

    async def requested() -> bool:
        return _condition(await sandbox.get("nodes", "node-1"), "DataEngineUpgradeRequested") == "True"

    await sandbox.wait_for(requested, what="node-1 DataEngineUpgradeRequested=True")
    assert _condition(await sandbox.get("nodes", "node-1"), "Schedulable") == "False"

    await sandbox.patch(
        "volumes", "v2-vol-001", {"spec": {"image": NEW, "targetNodeIDForLiveUpgrade": "node-2"}}
    )
    volume = await sandbox.wait_volume(
        "v2-vol-001",
        lambda v: (
            v["status"].get("currentTargetNodeIDForLiveUpgrade") == "node-2"
            and v["status"].get("currentImage") == NEW
        ),
        what="v2-vol-001 switched over to node-2",
    )
    assert volume["status"]["state"] == "attached" and volume["status"]["currentNodeID"] == "node-1"
    engine = await sandbox.engine_of("v2-vol-001")
    assert engine["spec"]["nodeID"] == "node-1"
    assert engine["status"]["currentTargetNodeIDForLiveUpgrade"] == "node-2"

    ledger = await control.io()
    assert ledger["dataPlane"]["switchoverSeconds"] == sandbox.simulator.config.switchover_seconds
    io = ledger["volumes"]["v2-vol-001"]
    assert io["detaches"] == 0 and io["attached"] and io["serving"]
    [gap] = io["gaps"]
    assert gap["reasons"] == ["suspended"] and gap["end"] is not None
    config = sandbox.simulator.config
    # never shorter than the data plane takes (suspend, switch, resume)
    assert gap["seconds"] >= config.v2_suspend_seconds + config.v2_switch_seconds + config.v2_resume_seconds


async def test_sc_v2_14_v2_faults_and_node_images_over_http(
    sandbox: Sandbox, control: SandboxControl
) -> None:
    state = await control.block_target("node-2")
    assert state["blockedTargetNodes"] == ["node-2"]
    state = await control.kill_v2_instance_manager("node-3")
    assert state["v2InstanceManagersDown"] == ["node-3"]

    async def node_3_down() -> bool:
        ims = await sandbox.list("instancemanagers")
        [im] = [i for i in ims if i["spec"]["nodeID"] == "node-3" and i["spec"]["dataEngine"] == "v2"]
        return bool(im["status"].get("currentState") != "running")

    await sandbox.wait_for(node_3_down, what="node-3's v2 IM down")
    assert (await control.revive_v2_instance_manager("node-3"))["v2InstanceManagersDown"] == []
    assert (await control.unblock_target("node-2"))["blockedTargetNodes"] == []
    await control.block_target("node-1")
    assert (await control.clear())["simulator"]["blockedTargetNodes"] == []

    await control.set_node_images("node-2", add=[NEW], remove=["longhornio/longhorn-engine:v1.10.0"])
    kube_node = await client.CoreV1Api(sandbox.api).read_node("node-2")
    names = node_image_names(sandbox.api.sanitize_for_serialization(kube_node))
    assert "longhornio/longhorn-engine:v1.10.0" not in names and NEW in names

    with pytest.raises(RuntimeError, match="404"):
        await control.block_target("node-9")
    with pytest.raises(RuntimeError, match="404"):
        await control.set_node_images("node-9", add=[NEW])
    with pytest.raises(RuntimeError, match="400"):
        await control.call("POST", "simulator/node-images", {"node": "node-1", "add": "not-a-list"})
    with pytest.raises(RuntimeError, match="404"):
        await control.call("POST", "io", {})
