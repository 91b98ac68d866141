"""A NodeDataEngineUpgrade deleted while its node's volumes are off the node's own instance manager
(switching over, the IM replaced, switching back) stays until they are home again (explorer cell
v2-upgrade/node:upgrading-instance-manager/target-deleted): gone at once, it took its node's
`DataEngineUpgradeRequested` with it, and Longhorn's instance handler marked the engines whose IM
was being replaced `error`, which detached their attached volumes (longhorn-behaviour.md §5.4).

So v2-upgrade creates every node upgrade with its finalizer; deleted there, the attempt aborts
(`deleted`), restores the targets, and only then takes the finalizer off. Deleted anywhere else it
goes at once. Either way the manager starts the node again (`_orphaned`)."""

from __future__ import annotations

import pytest

from corral_model.envelopes import Verb
from corral_v2_upgrade.commands import NODE_UPGRADE_FINALIZER
from corral_v2_upgrade.states import UpgradeState
from tests.unit.v2_upgrade.world import World, cluster, manager

S = UpgradeState
RESTORED_FIRST = (S.SWITCHING_OVER, S.UPGRADING_INSTANCE_MANAGER, S.SWITCHING_BACK)


def _deleted_in(state: str) -> tuple[World, str]:
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"})
    world.put(manager(nodes=("node-1",)))
    world.start()
    name = world.step_until("node-1", state).metadata.name
    world.delete("nodedataengineupgrade", name)
    return world, name


def test_every_node_upgrade_is_created_with_the_finalizer() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    world.start()
    for _ in range(10):
        world.step(tick=1.0)
    creates = [c for c in world.applied if c.verb is Verb.CREATE and c.target.kind == "NodeDataEngineUpgrade"]
    assert creates
    for create in creates:
        assert create.body is not None
        assert create.body["metadata"]["finalizers"] == [NODE_UPGRADE_FINALIZER]


@pytest.mark.parametrize("state", RESTORED_FIRST)
def test_deleted_off_its_instance_manager_it_stays_until_the_volumes_are_home(state: str) -> None:
    world, name = _deleted_in(state)
    aborted = world.get("nodedataengineupgrade", name)
    assert aborted is not None and aborted.metadata.deletion_timestamp, "held by the finalizer"
    world.step(tick=1.0)
    aborted = world.get("nodedataengineupgrade", name)
    assert aborted is not None, "not let go while the volumes are away"
    assert aborted.status.abort_reason == "deleted"
    assert aborted.status.state == S.SWITCHING_BACK
    for _ in range(30):
        world.step(tick=1.0)
        if world.get("nodedataengineupgrade", name) is None:
            break
    else:
        raise AssertionError("the deleted node upgrade was never let go")
    for volume in ("vol-a", "vol-b"):
        spec = world.get("volume", volume).spec
        assert spec.target_node_id_for_live_upgrade == "", f"{volume} let go on a temporary target"
    released = [c for c in world.applied if c.target.name == name and c.verb is Verb.PATCH and c.changes]
    assert released[-1].changes[0].path == "/metadata/finalizers"
    assert released[-1].changes[0].value == []


@pytest.mark.parametrize("state", [S.INITIALIZING, S.FAILING_REPLICAS, S.REBUILDING_REPLICA])
def test_deleted_anywhere_else_it_goes_at_once(state: str) -> None:
    world, name = _deleted_in(state)
    world.step(tick=1.0)
    assert world.get("nodedataengineupgrade", name) is None


def test_the_manager_starts_the_node_again_and_finishes() -> None:
    world, name = _deleted_in(S.UPGRADING_INSTANCE_MANAGER)
    assert world.run() == S.COMPLETED
    entry = world.get("dataengineupgrademanager", "upgrade").status.upgrade_nodes["node-1"]
    assert entry.state == S.COMPLETED
    assert name not in {u.metadata.name for u in world.node_upgrades("node-1")}
