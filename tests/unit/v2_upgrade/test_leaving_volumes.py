"""A volume deleted mid-upgrade leaves its node's plan (`status.volumes`): while it is being
deleted (Longhorn detaches it first) and once it is gone. The prototype kept it, as `error` ("in
neither detached nor attached state") while it detached (issue 24, behaviour 4)."""

from __future__ import annotations

import msgspec
import pytest

from corral_v2_upgrade.states import UpgradeState
from tests.unit.v2_upgrade.world import World, cluster, manager

S = UpgradeState


def _into(world: World, node: str, state: str) -> None:
    world.step_until(node, state)


def _start_deleting(world: World, name: str) -> None:
    """Longhorn's volume deletion: a deletionTimestamp, and the volume detaching."""
    vol = world.get("volume", name)
    meta = msgspec.structs.replace(vol.metadata, deletion_timestamp="2027-01-15T08:00:00Z")
    status = msgspec.structs.replace(vol.status, state="detaching")
    world.put(msgspec.structs.replace(vol, metadata=meta, status=status))
    world.stalled.add(name)  # the toy data plane leaves a volume being deleted alone


@pytest.mark.parametrize("state", [S.SWITCHING_OVER, S.UPGRADING_INSTANCE_MANAGER, S.SWITCHING_BACK])
def test_a_volume_being_deleted_then_gone_leaves_the_plan(state: str) -> None:
    world = cluster(volumes={"vol-a": "node-1", "vol-c": "node-1"})
    world.put(manager())
    world.start()
    _into(world, "node-1", state)
    assert "vol-c" in world.node_upgrades("node-1")[-1].status.volumes
    _start_deleting(world, "vol-c")
    world.step(tick=1.0)
    upgrade = world.node_upgrades("node-1")[-1]
    assert "vol-c" not in upgrade.status.volumes, upgrade.status.volumes
    assert upgrade.status.progress.endswith("/1"), upgrade.status.progress
    world.delete("volume", "vol-c")
    assert world.run() == S.COMPLETED
    [done] = world.node_upgrades("node-1")
    assert done.status.state == S.COMPLETED
    assert list(done.status.volumes) == ["vol-a"]


def test_a_volume_gone_before_initializing_ends_is_never_listed() -> None:
    world = cluster(volumes={"vol-a": "node-1", "vol-c": "node-1"})
    _start_deleting(world, "vol-c")
    world.put(manager())
    world.start()
    _into(world, "node-1", S.FAILING_REPLICAS)
    assert list(world.node_upgrades("node-1")[-1].status.volumes) == ["vol-a"]


def test_a_volume_deleted_as_its_node_upgrade_ends_leaves_the_ended_plan_too() -> None:
    """The last pass judged on a view that still held the volume (the explorer's
    v2-upgrade/node:finalizing/volume-deleted): the ended node upgrade listed it for good."""
    world = cluster(volumes={"vol-a": "node-1", "vol-c": "node-1"})
    world.put(manager())
    world.start()
    _into(world, "node-1", S.COMPLETED)
    assert "vol-c" in world.node_upgrades("node-1")[-1].status.volumes
    _start_deleting(world, "vol-c")
    world.step(tick=1.0)
    [done] = world.node_upgrades("node-1")
    assert done.status.state == S.COMPLETED
    assert list(done.status.volumes) == ["vol-a"]
    world.delete("volume", "vol-c")
    assert world.run() == S.COMPLETED
