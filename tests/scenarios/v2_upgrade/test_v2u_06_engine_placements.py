"""V2U-06: LEP "Success 2" and "Success 3" (acceptance-scenarios.md §5.4).

* Engines on node-1 with replicas only on node-2 and node-3 (node-1 takes no replicas): node-1's
  upgrade fails no replica, yet its volumes' targets still move away and back.
* Engines spread, one volume per node: each node's upgrade moves the target of its own volume,
  off the node being upgraded, and no other.

Both complete; every volume's target is moved off whichever node is upgrading at that moment,
checked write by write.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from corral_sandbox.seeds.model import Seed
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver


def target_moves(observer: UpgradeObserver) -> dict[str, list[tuple[str, str]]]:
    """volume → every (target it was switched to, node upgrading then), checking that a target
    set away from the volume's node is set while that very node upgrades, and not onto it."""
    moves: dict[str, list[tuple[str, str]]] = {}
    for write, upgrading in observer.in_flight():
        if write.plural != "volumes" or write.old is None or write.new is None:
            continue
        was = str(write.old["spec"].get("targetNodeIDForLiveUpgrade") or "")
        now = str(write.new["spec"].get("targetNodeIDForLiveUpgrade") or "")
        if now == was or not now:
            continue
        owner = str(write.new["spec"].get("nodeID", ""))
        moves.setdefault(write.name, []).append((now, upgrading))
        if now != owner:
            assert upgrading == owner, f"{write.name} moved to {now} while {upgrading or 'no node'} upgrades"
            assert now != upgrading
    return moves


@pytest.fixture
def sandbox_seed(request: pytest.FixtureRequest) -> Seed:
    if request.function.__name__ == "test_engines_spread_over_the_nodes":
        return scenario.v2_seed([scenario.v2_volume(f"vol-{n}", owner=n) for n in scenario.NODES])
    seed = scenario.v2_seed([scenario.v2_volume(f"vol-{i}", replicas=2) for i in (1, 2)])
    no_replicas = dataclasses.replace(seed.nodes[0], schedulable=False)
    return dataclasses.replace(seed, nodes=(no_replicas, *seed.nodes[1:]))


async def node_upgrade_of(observer: UpgradeObserver, node: str) -> dict[str, Any]:
    [first, *_] = [u for u in observer.created(NODE_UPGRADES) if u["spec"]["nodeID"] == node]
    [last] = observer.versions(NODE_UPGRADES, first["metadata"]["name"])[-1:]
    return last


async def test_engines_on_node_1_replicas_elsewhere(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.settled(sandbox)
    for volume in ("vol-1", "vol-2"):
        assert sorted(r["spec"]["nodeID"] for r in await sandbox.replicas_of(volume)) == ["node-2", "node-3"]
    since = observer.mark()
    await scenario.start_upgrade(sandbox)
    await scenario.wait_manager(sandbox, observer, "completed", within=120)

    node_1 = await node_upgrade_of(observer, "node-1")
    assert node_1["status"]["state"] == "completed"
    assert not node_1["status"].get("replicaVolumes")
    assert sorted(node_1["status"]["volumes"]) == ["vol-1", "vol-2"]
    failed = [
        v["metadata"]["name"]
        for v in observer.versions("replicas", since=since)
        if v["spec"]["nodeID"] == "node-1" and v["spec"].get("desireState") == "stopped"
    ]
    assert failed == []
    moves = target_moves(observer)
    for volume in ("vol-1", "vol-2"):
        [(away, during), (back, _)] = moves[volume]
        assert during == "node-1" and away in ("node-2", "node-3") and back == "node-1", moves[volume]
        obj = await sandbox.get("volumes", volume)
        assert obj["status"]["robustness"] == "healthy" and obj["status"]["currentImage"] == scenario.NEW_IM


async def test_engines_spread_over_the_nodes(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.start_upgrade(sandbox)
    await scenario.wait_manager(sandbox, observer, "completed", within=120)

    moves = target_moves(observer)
    for node in scenario.NODES:
        [(away, during), (back, _)] = moves[f"vol-{node}"]
        assert during == node and away != node and back == node, (node, moves[f"vol-{node}"])
        upgrade = await node_upgrade_of(observer, node)
        assert sorted(upgrade["status"]["volumes"]) == [f"vol-{node}"]
        obj = await sandbox.get("volumes", f"vol-{node}")
        assert obj["status"]["state"] == "attached" and obj["status"]["robustness"] == "healthy"
        assert obj["status"]["currentImage"] == scenario.NEW_IM
