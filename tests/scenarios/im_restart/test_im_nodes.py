"""IM-10 (a node the node selector excludes) and IM-11 (v2 disabled per node, T4.6), through the
whole stack, both invariants judged at every IM pod delete (scenario.py). node-1 and node-2 carry
`disk=ssd`, node-3 does not; the v2 data engine is on (so every node has the 2Gi of `hugepages-2Mi`
Longhorn's webhook asks before it lets v2 be enabled)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client

from corral_sandbox.seeds import Seed, seed_from_dict
from corral_sandbox.simulator import objects
from corral_sandbox.simulator.im_nodes import DISABLE_V2_LABEL
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.im_restart.scenario import ImObserver, busy_instances
from tests.scenarios.im_restart.test_im import WINDOW_S, attach, detach, restarted, wait_attached

pytestmark = pytest.mark.scenario


@pytest.fixture
def sandbox_seed() -> Seed:
    ssd = {"disk": "ssd"}
    return seed_from_dict(
        {
            "nodes": [
                {"name": "node-1", "labels": ssd, "hugepages": "2Gi"},
                {"name": "node-2", "labels": ssd, "hugepages": "2Gi"},
                {"name": "node-3", "hugepages": "2Gi"},
            ],
            "settings": {"v2-data-engine": "true"},
            "generate": {"volumes": 0},
        }
    )


async def _all_running(observer: ImObserver, engine: str, count: int) -> bool:
    managers = await observer.managers(engine=engine)
    return len(managers) == count and all(
        im.get("status", {}).get("currentState") == "running" for im in managers
    )


async def test_im_10_the_im_on_an_excluded_node_is_kept_while_busy_and_removed_once_idle(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    await sandbox.wait_for(lambda: _all_running(observer, "v1", 3), within=20, invariant=observer.holds)
    await attach(sandbox, "vol-3", "node-3")
    await wait_attached(sandbox, "vol-3", observer)
    excluded = (await observer.manager("node-3"))["metadata"]["name"]
    excluded_uid = await observer.pod_uid(excluded)
    kept = {
        im["metadata"]["name"]: await observer.pod_uid(im["metadata"]["name"])
        for im in await observer.managers()
    }
    kept.pop(excluded)
    await observer.set_setting("system-managed-components-node-selector", "disk:ssd")
    # (vol-3's replica may sit on node-1 or node-2: that IM is busy too, and waits)
    idle = {n: u for n, u in kept.items() if not busy_instances(await sandbox.get("instancemanagers", n))}
    pods = await restarted(sandbox, observer, idle)
    assert all(p["spec"]["nodeSelector"] == {"disk": "ssd"} for p in pods.values())

    async def busy_kept() -> bool:
        await observer.holds()
        return await observer.pod_uid(excluded) == excluded_uid

    await sandbox.stays(busy_kept, WINDOW_S, what="the busy IM on node-3 keeps its pod")
    await detach(sandbox, "vol-3")

    async def gone() -> bool:
        return not await observer.managers("node-3")

    await sandbox.wait_for(gone, within=20, what="node-3's IM removed once idle", invariant=observer.holds)
    await sandbox.stays(gone, 0.5, what="no new IM on node-3")


async def test_im_11_v2_disabled_on_one_node_then_enabled_again(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    await sandbox.wait_for(lambda: _all_running(observer, "v2", 3), within=20, invariant=observer.holds)
    v1_uid = await observer.pod_uid((await observer.manager("node-2"))["metadata"]["name"])
    quiet = dict(observer.deletes)

    async def untouched() -> bool:
        await observer.holds()
        return dict(observer.deletes) == quiet

    # A fresh v2 pod lags no setting: corral leaves every v2 IM alone.
    await sandbox.stays(untouched, WINDOW_S, what="no restart of freshly made v2 IMs")
    await sandbox.core.patch_node("node-2", {"metadata": {"labels": {DISABLE_V2_LABEL: "true"}}})

    async def v2_gone() -> bool:
        return not await observer.managers("node-2", "v2")

    await sandbox.wait_for(v2_gone, within=20, what="node-2's v2 IM removed", invariant=observer.holds)
    assert await observer.pod_uid((await observer.manager("node-2"))["metadata"]["name"]) == v1_uid
    await sandbox.core.patch_node("node-2", {"metadata": {"labels": {DISABLE_V2_LABEL: None}}})
    await sandbox.wait_for(lambda: _all_running(observer, "v2", 3), within=20, invariant=observer.holds)

    im_image = (await sandbox.get("settings", "default-instance-manager-image"))["value"]
    body = objects.volume("vol-v2", sandbox.namespace, image=im_image, replicas=1, data_engine="v2")
    await sandbox.create("volumes", body)

    async def replica_node() -> str:
        replicas = await sandbox.replicas_of("vol-v2")
        return str(replicas[0]["spec"]["nodeID"]) if replicas and replicas[0]["spec"]["nodeID"] else ""

    node = await sandbox.wait_for(replica_node, within=20, what="the v2 replica placed")
    with pytest.raises(client.ApiException) as refused:
        await sandbox.core.patch_node(node, {"metadata": {"labels": {DISABLE_V2_LABEL: "true"}}})
    assert "cannot disable v2 data engine" in str(refused.value.body)
