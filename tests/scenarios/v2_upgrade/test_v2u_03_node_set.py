"""V2U-03: which nodes a manager covers (acceptance-scenarios.md §5.4).

* `spec.nodes` empty, four nodes: node-3 carries the disable-v2 label → `completed` "V2 data
  engine is disabled for node node-3"; node-4 served nothing, so Longhorn already replaced its v2
  IM with one on the new image → `completed` "Old instance manager is not running"; node-1 (the
  engine) and node-2 (a replica) → `pending`, then upgraded.
* No node pending (the target is the image every v2 IM already runs) → the manager is `completed`
  at once, with no node upgrade.
* `spec.nodes` listed: only those, minus the disabled one, are pending; an unlisted node is not in
  `upgradeNodes` at all and its old IM keeps running.

One two-replica volume on node-1 (its replicas on node-1 and node-2: v2 replicas skip the
disabled node-3), so the IMs of node-1 and node-2 serve something and stay on the old image.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.seeds.model import Seed
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import MANAGERS
from tests.scenarios.v2_upgrade.observer import UpgradeObserver


@pytest.fixture
def sandbox_seed(request: pytest.FixtureRequest) -> Seed:
    nodes = 4 if request.function.__name__ == "test_empty_node_list_skips_disabled_and_replaced_nodes" else 3
    return scenario.v2_seed(
        [scenario.v2_volume("vol-1", replicas=2)],
        labels={"node-3": {scenario.DISABLE_V2_LABEL: "true"}},
        nodes=nodes,
    )


def first_node_set(observer: UpgradeObserver) -> dict[str, Any]:
    """`upgradeNodes` as the manager first wrote it (leaving `initializing`)."""
    for version in observer.versions(MANAGERS, scenario.MANAGER):
        nodes = (version.get("status") or {}).get("upgradeNodes")
        if nodes:
            return dict(nodes)
    raise AssertionError("the manager never wrote its node set")


async def test_empty_node_list_skips_disabled_and_replaced_nodes(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.settled(sandbox)
    assert sorted(r["spec"]["nodeID"] for r in await sandbox.replicas_of("vol-1")) == ["node-1", "node-2"]
    await scenario.pull_image(sandbox, scenario.NEW_IM)
    await scenario.set_target_image(sandbox, scenario.NEW_IM)

    async def replaced() -> bool:
        ims = await scenario.v2_instance_managers(sandbox, "node-4")
        return [im["spec"]["image"] for im in ims] == [scenario.NEW_IM] and bool(
            await scenario.running_v2_im(sandbox, "node-4", scenario.NEW_IM)
        )

    await sandbox.wait_for(replaced, within=30, what="node-4's idle v2 IM replaced", invariant=observer.holds)
    await scenario.create_manager(sandbox)

    manager = await scenario.wait_manager(sandbox, observer, "completed", within=120)
    nodes = first_node_set(observer)
    assert nodes["node-1"]["state"] == nodes["node-2"]["state"] == "pending"
    assert nodes["node-3"] == {"state": "completed", "message": "V2 data engine is disabled for node node-3"}
    assert nodes["node-4"] == {
        "state": "completed",
        "message": "Old instance manager is not running for node node-4",
    }
    assert [u["spec"]["nodeID"] for u in await scenario.node_upgrades(sandbox)] == ["node-1", "node-2"]
    assert {n: e["state"] for n, e in manager["status"]["upgradeNodes"].items()} == dict.fromkeys(
        ("node-1", "node-2", "node-3", "node-4"), "completed"
    )


async def test_nothing_pending_completes_at_once(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    # The target is the image the v2 IMs already run (pulled, as a running image is): no node
    # has an old one.
    await scenario.pull_image(sandbox, scenario.OLD_IM)
    await scenario.create_manager(sandbox)
    manager = await scenario.wait_manager(sandbox, observer, "completed", within=60)
    assert {n: e["state"] for n, e in manager["status"]["upgradeNodes"].items()} == dict.fromkeys(
        scenario.NODES, "completed"
    )
    assert manager["status"]["upgradeNodes"]["node-1"]["message"].startswith(
        "Old instance manager is not running"
    )
    assert "upgradingNode" not in manager["status"] or not manager["status"]["upgradingNode"]
    assert await scenario.node_upgrades(sandbox) == []


async def test_listed_nodes_only(sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver) -> None:
    await scenario.start_upgrade(sandbox, nodes=("node-1", "node-3"))
    manager = await scenario.wait_manager(sandbox, observer, "completed", within=90)
    nodes = first_node_set(observer)
    assert set(nodes) == {"node-1", "node-3"}
    assert nodes["node-1"]["state"] == "pending"
    assert nodes["node-3"]["state"] == "completed"
    assert [u["spec"]["nodeID"] for u in await scenario.node_upgrades(sandbox)] == ["node-1"]
    assert set(manager["status"]["upgradeNodes"]) == {"node-1", "node-3"}
    # node-2 was not listed: its v2 IM on the old image still runs
    assert await scenario.running_v2_im(sandbox, "node-2", scenario.OLD_IM)
