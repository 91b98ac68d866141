"""V2U-00 (acceptance-scenarios.md §5.4): the baseline — what current Longhorn does with v2 volumes
when a new instance-manager image arrives and nothing orchestrates a v2 upgrade. A plain sandbox
test (no corral service runs; the auto-upgrader's rules are its own decider on a snapshot of the
sandbox, as `corral plan` runs it):

* the manual engine-upgrade API refuses a v2 volume;
* the automatic engine upgrade plans the v1 volume and never a v2 one;
* an old v2 IM with running instances is kept (same pod, restart count 0) while a new default image
  is set, and replaced on the new image once idle (IM-08);
* a detached v2 volume given the new image starts on it, in a new-image IM, at its next attach.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_decision.plan import plan_snapshot
from corral_engine_upgrade.service import DEFINITION as ENGINE_UPGRADE
from corral_sandbox.seeds import Seed
from corral_sandbox.seeds.v2 import v2_seed
from corral_sandbox.simulator import SimConfig
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox, fast_config

pytestmark = pytest.mark.scenario

OLD_IM = "longhornio/longhorn-instance-manager:v1.10.0"
NEW_IM = "longhornio/longhorn-instance-manager:v1.11.0"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"
WINDOW = 1.0  # a negative window: many times every simulated step here


@pytest.fixture
def sandbox_seed() -> Seed:
    # 4 nodes: v2-vol-001's engine on node-1 and replicas on three of them, one node idle
    return v2_seed(nodes=4, volumes=1, detached=1, replicas=2)


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config()


async def _replicas_made(sandbox: Sandbox, volume: str, count: int) -> bool:
    return len(await sandbox.replicas_of(volume)) == count


async def v2_ims(sandbox: Sandbox) -> dict[str, dict[str, Any]]:
    """node → its v2 instance manager (the one not being deleted)."""
    return {
        im["spec"]["nodeID"]: im
        for im in await sandbox.list("instancemanagers")
        if im["spec"]["dataEngine"] == "v2" and not im["metadata"].get("deletionTimestamp")
    }


async def snapshot(sandbox: Sandbox) -> dict[str, Any]:
    """The cluster as `kubectl get volumes,replicas,engineimages,nodes,settings -o json` lists it."""
    items: list[dict[str, Any]] = []
    for plural in ("volumes", "replicas", "engineimages", "nodes", "settings"):
        items += await sandbox.list(plural)
    return {"apiVersion": "v1", "kind": "List", "items": items}


async def test_v2u_00_current_longhorn_with_a_new_instance_manager_image(sandbox: Sandbox) -> None:
    attached = await sandbox.wait_volume(
        "v2-vol-001",
        lambda v: (
            v.get("status", {}).get("state") == "attached"
            and v.get("status", {}).get("robustness") == "healthy"
        ),
        what="v2-vol-001 attached and healthy",
    )
    assert attached["spec"]["image"] == OLD_IM

    # the manual engine-upgrade API refuses a v2 volume
    answer = await sandbox.engine_upgrade("v2-vol-001", DEFAULT_IMAGE)
    assert answer.status == 500 and "the volume is using data engine v2" in answer.message

    # the automatic engine upgrade plans the v1 volume, never a v2 one
    await sandbox.deploy_engine_image(UPGRADE_IMAGE)
    await sandbox.create_volume("v1-old", image=UPGRADE_IMAGE)
    await sandbox.wait_volume(
        "v1-old", lambda v: v.get("status", {}).get("state") == "detached", what="v1-old detached"
    )
    # a new volume reads `detached` before its replicas exist: plan once it is whole
    await sandbox.wait_for(lambda: _replicas_made(sandbox, "v1-old", 2), what="v1-old's two replicas")
    await sandbox.set_setting(LIMIT_SETTING, "3")
    commands, _ = plan_snapshot(ENGINE_UPGRADE, await snapshot(sandbox), now=0.0)
    planned = {c.target.name for c in commands}
    assert "v1-old" in planned, "the auto-upgrader does plan the v1 volume"
    assert not planned & {"v2-vol-001", "v2-detached-001"}, "and never a v2 one"
    await sandbox.set_setting(LIMIT_SETTING, "0")

    # a new default IM image: busy v2 IMs are kept, an idle one is replaced
    busy = {r["spec"]["nodeID"] for r in await sandbox.replicas_of("v2-vol-001")} | {"node-1"}
    before = await v2_ims(sandbox)
    pods = {
        node: (await sandbox.core.read_namespaced_pod(im["metadata"]["name"], sandbox.namespace))
        for node, im in before.items()
        if node in busy
    }
    await sandbox.set_setting("default-instance-manager-image", NEW_IM)
    idle = sorted({"node-1", "node-2", "node-3", "node-4"} - busy)

    async def idle_replaced() -> bool:
        ims = await v2_ims(sandbox)
        return all(ims.get(n, {}).get("spec", {}).get("image") == NEW_IM for n in idle)

    await sandbox.wait_for(idle_replaced, what=f"idle v2 IMs on {idle} replaced on the new image")

    async def busy_kept() -> bool:
        ims = await v2_ims(sandbox)
        return all(ims[n]["metadata"]["uid"] == before[n]["metadata"]["uid"] for n in busy)

    await sandbox.stays(busy_kept, WINDOW, what="the busy old v2 IMs kept")
    for node, pod in pods.items():
        now = await sandbox.core.read_namespaced_pod(pod.metadata.name, sandbox.namespace)
        assert now.metadata.uid == pod.metadata.uid and now.status.container_statuses[0].restart_count == 0, (
            node
        )
    volume = await sandbox.get("volumes", "v2-vol-001")
    assert volume["status"]["state"] == "attached" and volume["status"]["currentImage"] == OLD_IM

    # a detached v2 volume given the new image starts on it at its next attach, in a new-image IM
    target = idle[0]
    await sandbox.patch("volumes", "v2-detached-001", {"spec": {"image": NEW_IM}})
    await sandbox.wait_volume(
        "v2-detached-001",
        lambda v: v.get("status", {}).get("currentImage") == NEW_IM,
        what="adopted while detached",
    )
    await sandbox.patch("volumes", "v2-detached-001", {"spec": {"nodeID": target}})
    adopted = await sandbox.wait_volume(
        "v2-detached-001",
        lambda v: v.get("status", {}).get("state") == "attached",
        what=f"attached to {target}",
    )
    assert adopted["status"]["currentImage"] == NEW_IM
    engine = await sandbox.engine_of("v2-detached-001")
    assert engine["status"]["instanceManagerName"] == (await v2_ims(sandbox))[target]["metadata"]["name"]

    # detaching both leaves every v2 IM idle: the old ones are replaced on the new image too
    for name in ("v2-vol-001", "v2-detached-001"):
        await sandbox.patch("volumes", name, {"spec": {"nodeID": ""}})

    async def all_on_new_image() -> bool:
        ims = await v2_ims(sandbox)
        return len(ims) == 4 and all(im["spec"]["image"] == NEW_IM for im in ims.values())

    await sandbox.wait_for(all_on_new_image, what="every v2 IM on the new image once idle")
    io = sandbox.simulator.memory.io["v2-vol-001"]
    assert io.detaches == 1 and io.crash_detaches == 0 and io.gaps == [], "only the requested detach"
    # v1 is untouched: the v1 volume stays detached on its own image
    assert (await sandbox.get("volumes", "v1-old"))["spec"]["image"] == UPGRADE_IMAGE
    assert lh_objects.engine_name("v1-old") in {e["metadata"]["name"] for e in await sandbox.list("engines")}
