"""An operator's abort (`kubectl annotate lhum <name> corral.longhorn.io/abort=<note>`): the node in
flight restores its volumes and ends, no further node starts, and the manager ends in `error` with
what was and was not upgraded; a node already rebuilding finishes instead, as that is its way
back. Each is told as a Warning Event."""

from __future__ import annotations

import msgspec

from corral_model import longhorn as lh
from corral_model.envelopes import Verb
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.view import ABORT_ANNOTATION
from tests.unit.v2_upgrade.world import OLD, World, cluster, manager

S = UpgradeState


def abort(world: World, note: str = "") -> None:
    current: lh.DataEngineUpgradeManager = world.get("dataengineupgrademanager", "upgrade")
    meta = msgspec.structs.replace(current.metadata, annotations={ABORT_ANNOTATION: note})
    world.put(msgspec.structs.replace(current, metadata=meta))


def until_node_in(world: World, node: str, state: str, limit: int = 60) -> None:
    for _ in range(limit):
        world.step(tick=1.0)
        upgrades = world.node_upgrades(node)
        if upgrades and upgrades[-1].status.state == state:
            return
    raise AssertionError(f"{node} never reached {state}")


def test_an_abort_mid_switch_over_restores_the_node_and_starts_no_other() -> None:
    world = cluster(volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=0, events=True))
    world.put(manager())
    world.start()
    until_node_in(world, "node-1", S.UPGRADING_INSTANCE_MANAGER)
    assert world.get("volume", "vol-a").spec.target_node_id_for_live_upgrade  # moved away
    abort(world, "maintenance window over")
    assert world.run() == S.ERROR
    world.step(tick=1.0)
    [upgrade] = world.node_upgrades("node-1")
    assert (upgrade.status.state, upgrade.status.abort_reason) == (S.ERROR, "requested")
    assert upgrade.status.message == "aborted (requested) in upgrading-instance-manager; restored"
    vol = world.get("volume", "vol-a")  # back on its node, on the old IM it never left
    assert (vol.spec.image, vol.spec.target_node_id_for_live_upgrade) == (OLD, "")
    assert not [c for c in world.applied if c.verb is Verb.DELETE and c.target.kind == "InstanceManager"]
    final = world.get("dataengineupgrademanager", "upgrade").status
    assert final.message == (
        "aborted by the operator (maintenance window over): 0 of 3 nodes upgraded;"
        " not upgraded: node-1, node-2, node-3"
    )
    assert final.upgrading_node == "" and final.upgrade_nodes["node-1"].retries == 0
    assert world.node_upgrades("node-2") == world.node_upgrades("node-3") == []
    warnings = [
        ((c.body or {})["involvedObject"]["kind"], (c.body or {})["reason"])
        for c in world.events
        if (c.body or {})["type"] == "Warning"
    ]
    assert warnings == [
        ("NodeDataEngineUpgrade", "Aborted"),
        ("NodeDataEngineUpgrade", "NodeUpgradeFailed"),
        ("DataEngineUpgradeManager", "Aborted"),
    ]


def test_an_abort_before_any_node_started_ends_at_once() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    abort(world)
    world.start()
    assert world.run() == S.ERROR
    status = world.get("dataengineupgrademanager", "upgrade").status
    assert status.message == "aborted by the operator before any node started"
    assert world.all("nodedataengineupgrade") == []


def test_a_node_already_rebuilding_finishes_then_the_upgrade_stops() -> None:
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"})
    world.put(manager())
    world.start()
    until_node_in(world, "node-1", S.REBUILDING_REPLICA)
    abort(world)
    assert world.run() == S.ERROR
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.state == S.COMPLETED and not upgrade.status.abort_reason
    status = world.get("dataengineupgrademanager", "upgrade").status
    assert status.message == "aborted by the operator: 1 of 3 nodes upgraded; not upgraded: node-2, node-3"
    assert not [c for c in world.applied if c.verb is Verb.CREATE and "node-2" in c.target.name]
