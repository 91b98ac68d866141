"""A node upgrade deleted mid-flight (after it failed the node's replicas and moved its volumes'
targets away) must not stall the whole upgrade: the node is released first, its volumes rebuild,
and only then does the next attempt start (issue 24, behaviour 3). The prototype created the next
attempt at once; its node's upgrade-requested flag kept the degraded volumes from rebuilding, and
the attempt waited in `initializing` ("not healthy") for good."""

from __future__ import annotations

import pytest

from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.states import UpgradeState
from tests.unit.v2_upgrade.world import World, cluster, manager

S = UpgradeState


def _orphaned_in(state: str, config: DeciderConfig | None = None, nodes: tuple[str, ...] = ()) -> World:
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"}, config=config)
    world.rebuild_passes = 3
    world.put(manager(nodes=nodes))
    world.start()
    found = world.step_until("node-1", state)
    assert world.get("volume", "vol-a").status.robustness == "degraded", "its replica on node-1 is gone"
    world.delete("nodedataengineupgrade", found.metadata.name)
    return world


@pytest.mark.parametrize("state", [S.SWITCHING_OVER, S.UPGRADING_INSTANCE_MANAGER, S.SWITCHING_BACK])
def test_a_node_orphaned_mid_flight_is_released_until_its_volumes_rebuild(state: str) -> None:
    world = _orphaned_in(state)
    started_while_degraded = []
    for _ in range(20):
        world.step(tick=1.0)
        healthy = world.get("volume", "vol-a").status.robustness == "healthy"
        attempts = [u for u in world.node_upgrades("node-1") if not u.metadata.deletion_timestamp]
        if attempts and not healthy:
            started_while_degraded.append(world.clock.now)
        if healthy:
            break
    assert not started_while_degraded, "no new attempt flags the node while its volumes are degraded"
    assert world.get("volume", "vol-a").status.robustness == "healthy", "released, the volume rebuilt"
    assert world.run() == S.COMPLETED
    mgr = world.get("dataengineupgrademanager", "upgrade")
    assert mgr.status.upgrade_nodes["node-1"].state == S.COMPLETED
    assert mgr.status.message == "3 of 3 nodes upgraded"
    for name in ("vol-a", "vol-b"):
        spec = world.get("volume", name).spec
        assert spec.target_node_id_for_live_upgrade == "", f"{name} left on a temporary target"


def test_while_released_the_node_says_what_it_waits_for() -> None:
    """(With other nodes to upgrade, the next one may start meanwhile: its own flag does not hold
    this volume's rebuild. Here node-1 is the only one.)"""
    world = _orphaned_in(S.SWITCHING_OVER, nodes=("node-1",))
    for _ in range(20):  # the deleted attempt restores the volumes' targets, then lets go
        world.step(tick=1.0)
        if not world.node_upgrades("node-1"):
            break
    world.step(tick=1.0)
    world.step(tick=1.0)
    mgr = world.get("dataengineupgrademanager", "upgrade")
    entry = mgr.status.upgrade_nodes["node-1"]
    assert entry.state == S.PENDING
    assert entry.message == "waiting for volume vol-a (degraded) to be healthy before starting"
    assert mgr.status.message == (
        "waiting before the next node: node node-1: waiting for volume vol-a (degraded) to be healthy"
        " before starting"
    )
    assert world.node_upgrades("node-1") == [], "released: no attempt flags it"


def test_a_node_whose_upgrade_keeps_being_deleted_ends_in_error() -> None:
    """Bounded: the orphans do not use a retry (V2U-22), but they are not endless either."""
    world = cluster(volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=0, max_retries=2))
    world.put(manager())
    world.start()
    deleted = 0
    for _ in range(200):
        world.step(tick=1.0)
        mgr = world.get("dataengineupgrademanager", "upgrade")
        if mgr.status.state in (S.COMPLETED, S.ERROR):
            break
        for upgrade in world.node_upgrades("node-1"):
            if upgrade.status.state == S.FAILING_REPLICAS:
                world.delete("nodedataengineupgrade", upgrade.metadata.name)
                deleted += 1
    entry = world.get("dataengineupgrademanager", "upgrade").status.upgrade_nodes["node-1"]
    assert entry.state == S.ERROR, entry
    assert entry.message == "node upgrade resource not found; 3 attempts did not finish"
    assert deleted <= 3
    assert world.run() == S.COMPLETED


def test_a_volume_degraded_after_the_start_releases_the_node_instead_of_waiting_on_it() -> None:
    """The node upgrade's own flag holds the rebuild its `initializing` waits for: it lets the node
    go (no retry used), and the manager starts it again once the volume is healthy."""
    world = cluster(volumes={"vol-a": "node-1"})
    world.rebuild_passes = 3
    world.put(manager(nodes=("node-1",)))
    world.start()
    for _ in range(10):  # until the node upgrade exists: node-1 is flagged from then on
        if world.node_upgrades("node-1"):
            break
        world.step(tick=1.0)
    [first] = world.node_upgrades("node-1")
    assert first.status.state in (S.UNDEFINED, S.INITIALIZING)
    world.delete("replica", "vol-a-r-node-2")  # a replica lost elsewhere: vol-a degraded
    for _ in range(10):
        world.step(tick=1.0)
        if world.get("nodedataengineupgrade", first.metadata.name).status.state == S.ERROR:
            break
    released = world.get("nodedataengineupgrade", first.metadata.name)
    assert (released.status.state, released.status.abort_reason) == (S.ERROR, "released"), released.status
    assert "vol-a" in released.status.message
    assert world.run() == S.COMPLETED
    entry = world.get("dataengineupgrademanager", "upgrade").status.upgrade_nodes["node-1"]
    assert (entry.state, entry.retries) == (S.COMPLETED, 0), entry
