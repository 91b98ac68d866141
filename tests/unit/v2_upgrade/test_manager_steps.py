"""The manager's steps (longhorn-behaviour.md §5.5, first table) and the redesign's additions: the
image check, the node set, one node at a time, bounded retries with a summary, an orphaned node,
a target image changed mid-flight and a scheduled start."""

from __future__ import annotations

import msgspec

from corral_model import longhorn as lh
from corral_model.envelopes import Verb
from corral_v2_upgrade.commands import rfc3339
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.view import DEFAULT_IM_IMAGE, DISABLE_V2_LABEL
from tests.unit.v2_upgrade.world import (
    NEW,
    OLD,
    World,
    cluster,
    instance_manager,
    kube_node,
    manager,
    setting,
)

S = UpgradeState
NEWER = "longhornio/longhorn-instance-manager:v1.10.1"


def status(world: World, name: str = "upgrade") -> lh.DataEngineUpgradeManagerStatus:
    found: lh.DataEngineUpgradeManager = world.get("dataengineupgrademanager", name)
    return found.status


def test_a_node_missing_the_image_fails_the_manager_naming_it() -> None:
    """V2U-02: no node upgrade is created."""
    world = cluster()
    world.put(kube_node("node-2", images=(OLD,)), manager())
    world.start()
    assert world.run() == S.ERROR
    assert status(world).message == f"failed to find default instance manager image {NEW} in node node-2"
    assert world.all("nodedataengineupgrade") == []


def test_the_node_set_skips_disabled_and_already_upgraded_nodes() -> None:
    """V2U-03 with spec.nodes empty."""
    world = cluster(nodes=4)
    world.put(kube_node("node-2", **{DISABLE_V2_LABEL: "true"}))
    world.delete("instancemanager", instance_manager("node-3").metadata.name)
    world.put(instance_manager("node-3", NEW), manager())
    world.start()
    world.step()
    world.step()
    nodes = status(world).upgrade_nodes
    assert {n: e.state for n, e in nodes.items()} == {
        "node-1": "pending",
        "node-2": "completed",
        "node-3": "completed",
        "node-4": "pending",
    }
    assert nodes["node-2"].message == "V2 data engine is disabled for node node-2"
    assert nodes["node-3"].message == "Old instance manager is not running for node node-3"


def test_listed_nodes_only_and_nothing_pending_completes_at_once() -> None:
    world = cluster()
    world.put(kube_node("node-1", **{DISABLE_V2_LABEL: "true"}), manager(nodes=("node-1",)))
    world.start()
    assert world.run() == S.COMPLETED
    assert list(status(world).upgrade_nodes) == ["node-1"]
    assert world.all("nodedataengineupgrade") == []


def test_two_managers_never_have_two_nodes_in_flight() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager("first"), manager("second"))
    world.start()
    for _ in range(120):
        world.step(tick=1.0)
        busy = [u for u in world.all("nodedataengineupgrade") if u.status.state not in ("completed", "error")]
        assert len(busy) <= 1
    assert {str(status(world, m).state) for m in ("first", "second")} == {"completed"}


def test_a_failing_node_is_retried_then_marked_error_and_the_manager_moves_on() -> None:
    """§5.6: the prototype's manager waited forever behind a node upgrade in `error`."""
    world = cluster(
        volumes={"vol-a": "node-1", "vol-b": "node-2"}, config=DeciderConfig(node_timeout=20, max_retries=2)
    )
    world.stalled.add("vol-a")  # node-1's switch-over never finishes: every attempt times out
    world.put(manager())
    world.start()
    assert world.run(limit=400) == S.COMPLETED
    final = status(world)
    assert final.upgrade_nodes["node-1"].state == S.ERROR and final.upgrade_nodes["node-1"].retries == 2
    assert final.upgrade_nodes["node-2"].state == final.upgrade_nodes["node-3"].state == S.COMPLETED
    assert final.message.startswith(
        "2 of 3 nodes upgraded; failed: node-1 (failed 2 times, last: aborted (timeout)"
    )
    attempts = world.node_upgrades("node-1")
    assert len(attempts) == 2 and len({a.metadata.name for a in attempts}) == 2
    assert all(a.status.state == S.ERROR for a in attempts)


def test_an_orphaned_node_is_reset_to_pending_with_its_retries_kept_then_upgraded() -> None:
    """V2U-22."""
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    world.start()
    for _ in range(6):
        world.step(tick=1.0)
    assert status(world).upgrading_node == "node-1"
    mgr = world.get("dataengineupgrademanager", "upgrade")
    entry = msgspec.structs.replace(mgr.status.upgrade_nodes["node-1"], retries=1)
    world.put(
        msgspec.structs.replace(
            mgr,
            status=msgspec.structs.replace(
                mgr.status, upgrade_nodes={**mgr.status.upgrade_nodes, "node-1": entry}
            ),
        )
    )
    [orphan] = world.node_upgrades("node-1")
    world.delete("nodedataengineupgrade", orphan.metadata.name)
    world.step(tick=1.0)  # deleted in failing-replicas: v2-upgrade's finalizer comes off at once
    assert world.node_upgrades("node-1") == []
    world.step(tick=1.0)
    node_1 = status(world).upgrade_nodes["node-1"]
    assert (node_1.state, node_1.retries, status(world).upgrading_node) == (S.PENDING, 1, "")
    # The next attempt is a new object (a new name, so a new create command id), not the lost one
    # again: the bus would drop a create with the lost one's id as a duplicate.
    [create] = [c for c in world.step(tick=1.0) if c.verb is Verb.CREATE]
    assert create.target.name != orphan.metadata.name
    assert world.run() == S.COMPLETED
    assert status(world).upgrade_nodes["node-1"].state == S.COMPLETED


def test_a_target_image_changed_mid_flight_aborts_and_resets_without_a_retry() -> None:
    """V2U-17: the node in flight is restored and pending again; every node ends on the new image."""
    world = cluster(volumes={"vol-a": "node-1"})
    for name in ("node-1", "node-2", "node-3"):
        world.put(kube_node(name, images=(OLD, NEW, NEWER)))
    world.put(manager())
    world.start()
    for _ in range(40):
        world.step(tick=1.0)
        upgrades = world.node_upgrades("node-1")
        if upgrades and upgrades[0].status.state == S.SWITCHING_OVER:
            break
    world.put(setting(DEFAULT_IM_IMAGE, NEWER))
    assert world.run(limit=400) == S.COMPLETED
    first, *later = sorted(world.node_upgrades("node-1"), key=lambda u: int(u.metadata.resource_version))
    assert first.status.abort_reason == "target-image-changed" and first.status.state == S.ERROR
    assert first.spec.instance_manager_image == NEW
    assert [u.spec.instance_manager_image for u in later] == [NEWER]
    final = status(world)
    assert final.upgrade_nodes["node-1"].retries == 0
    v2 = {
        im.spec.node_id: im.spec.image for im in world.all("instancemanager") if im.spec.data_engine == "v2"
    }
    assert v2 == {"node-1": NEWER, "node-2": NEWER, "node-3": NEWER}
    assert world.get("volume", "vol-a").spec.image == NEWER


def test_no_node_starts_before_the_scheduled_time_and_a_later_change_is_ignored() -> None:
    """V2U-18."""
    world = cluster(volumes={"vol-a": "node-1"})
    start = world.clock.now + 100
    world.put(manager(start_time=rfc3339(start)))
    world.start()
    for _ in range(10):
        world.step(tick=1.0)
    assert world.all("nodedataengineupgrade") == []
    assert status(world).message == f"scheduled to start at {rfc3339(start)}"
    assert world.decider.next_due() == start
    world.clock.now = start
    for _ in range(3):
        world.step(tick=1.0)
    assert world.node_upgrades("node-1")
    mgr = world.get("dataengineupgrademanager", "upgrade")
    later = rfc3339(world.clock.now + 10_000)
    world.put(msgspec.structs.replace(mgr, spec=msgspec.structs.replace(mgr.spec, start_time=later)))
    assert world.run() == S.COMPLETED


def test_unsupported_data_engine_is_an_error() -> None:
    world = cluster()
    mgr = manager()
    world.put(msgspec.structs.replace(mgr, spec=msgspec.structs.replace(mgr.spec, data_engine="v1")))
    world.start()
    assert world.run() == S.ERROR
    assert status(world).message == "unsupported data engine v1"
    assert not [c for c in world.applied if c.verb is not Verb.PATCH_STATUS]


def test_a_node_upgrade_it_did_not_create_is_waited_for_never_adopted_or_doubled() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    stray = lh.NodeDataEngineUpgrade(
        metadata=lh.ObjectMeta(name="by-hand", namespace="longhorn-system", uid="uid-by-hand"),
        spec=lh.NodeDataEngineUpgradeSpec(
            node_id="node-2", instance_manager_image=NEW, data_engine_upgrade_manager="upgrade"
        ),
        status=lh.NodeDataEngineUpgradeStatus(state=S.INITIALIZING),
    )
    node_2 = world.get("node", "node-2")
    world.put(stray, manager())
    world.put(msgspec.structs.replace(node_2, status=lh.NodeStatus()))  # not ready: the stray waits
    world.start()
    for _ in range(10):
        world.step(tick=1.0)
    assert status(world).upgrading_node == ""
    assert status(world).message == "waiting for another node upgrade to finish"
    assert [u.metadata.name for u in world.all("nodedataengineupgrade")] == ["by-hand"]
