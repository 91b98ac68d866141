"""IM-12: hugepage safety for v2 IMs. node-1 has 4Gi of `hugepages-2Mi`, node-2 and node-3 2Gi when
v2 is enabled (Longhorn's webhook asks every node for the 2Gi of the default memory size), and once
the v2 IMs run, node-2's hugepages are taken away (its operator reconfigured the node: it now
reports none). When `data-engine-memory-size` changes, the idle v2 IMs whose node can take the new
size are restarted; node-2's is not, and its SettingSynced condition says why. Both invariants
judged at every IM pod delete (scenario.py)."""

from __future__ import annotations

import pytest

from corral_sandbox.seeds import Seed, seed_from_dict
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.im_restart.scenario import ImObserver, setting_synced
from tests.scenarios.im_restart.test_im import WINDOW_S, restarted

pytestmark = pytest.mark.scenario

SKIPPED = "skipping pod deletion because sufficient hugepage capacity for rescheduling cannot be confirmed"


@pytest.fixture
def sandbox_seed() -> Seed:
    return seed_from_dict(
        {
            "nodes": [
                {"name": "node-1", "hugepages": "4Gi"},
                {"name": "node-2", "hugepages": "2Gi"},
                {"name": "node-3", "hugepages": "2Gi"},
            ],
            "settings": {"v2-data-engine": "true"},
            "generate": {"volumes": 0},
        }
    )


async def test_im_12_no_restart_where_the_node_cannot_take_the_new_hugepage_size(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    async def v2_running() -> bool:
        managers = await observer.managers(engine="v2")
        return len(managers) == 3 and all(
            im.get("status", {}).get("currentState") == "running" for im in managers
        )

    await sandbox.wait_for(v2_running, within=20, invariant=observer.holds)
    await sandbox.set_hugepages("node-2", "")
    v2 = {im["spec"]["nodeID"]: im["metadata"]["name"] for im in await observer.managers(engine="v2")}
    before = {node: await observer.pod_uid(name) for node, name in v2.items()}
    await observer.set_setting("data-engine-memory-size", '{"v2":"1024"}')
    pods = await restarted(
        sandbox, observer, {v2["node-1"]: before["node-1"], v2["node-3"]: before["node-3"]}
    )
    for pod in pods.values():
        assert pod["spec"]["containers"][0]["resources"]["limits"]["hugepages-2Mi"] == "1024Mi"

    async def explained() -> bool:
        held = setting_synced(await sandbox.get("instancemanagers", v2["node-2"])) or {}
        return held.get("status") == "False" and SKIPPED in held.get("message", "")

    await sandbox.wait_for(explained, within=20, what="node-2's condition says why", invariant=observer.holds)

    async def kept() -> bool:
        await observer.holds()
        return await observer.pod_uid(v2["node-2"]) == before["node-2"]

    await sandbox.stays(kept, WINDOW_S, what="node-2's v2 IM keeps its pod")
    message = (setting_synced(await sandbox.get("instancemanagers", v2["node-2"])) or {})["message"]
    assert "data-engine-hugepage-enabled" in message and "data-engine-memory-size" in message
    for im in await observer.managers(engine="v1"):
        assert observer.deletes[im["metadata"]["name"]] == 0, "v1 IMs have no hugepages to sync"
