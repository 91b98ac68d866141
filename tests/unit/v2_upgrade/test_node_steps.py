"""The node upgrade's steps one by one (longhorn-behaviour.md §5.5, second table), with corral's
fixes of the prototype (§5.6): what each state waits for, what it writes, and what it never does."""

from __future__ import annotations

import msgspec

from corral_model import longhorn as lh
from corral_model.envelopes import Command, Verb
from corral_v2_upgrade.commands import rfc3339
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.step import parse_time
from corral_v2_upgrade.view import FOR_UPGRADE_LABEL
from tests.unit.v2_upgrade.world import NEW, OLD, World, cluster, manager, replica, volume

S = UpgradeState


def started(world: World) -> World:
    world.put(manager())
    world.start()
    return world


def step_until(world: World, node: str, state: str, limit: int = 60) -> lh.NodeDataEngineUpgrade:
    return world.step_until(node, state, limit)


def transition_into(world: World, node: str, state: str, limit: int = 10) -> list[Command]:
    """Step until the node's upgrade is in `state`; the commands of the pass that moved it there."""
    for _ in range(limit):
        commands = world.step(tick=1.0)
        if world.node_upgrades(node)[0].status.state == state:
            return commands
    raise AssertionError(f"{node} never reached {state}: {[u.status for u in world.node_upgrades(node)]}")


def test_a_single_replica_volume_holds_the_node_in_initializing_until_it_has_two() -> None:
    """V2U-07: no replica failed, no IM deleted; raising the replica count lets it proceed."""
    world = started(cluster(volumes={"pvc-x": "node-1"}, replicas=1))
    for _ in range(10):
        world.step(tick=1.0)
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.state == S.INITIALIZING
    assert (
        upgrade.status.message == "volume pvc-x has only 1 replica, which is not supported for live upgrade"
    )
    assert not [c for c in world.applied if c.target.kind in ("Replica", "InstanceManager", "Volume")]
    vol = world.get("volume", "pvc-x")
    world.put(msgspec.structs.replace(vol, spec=msgspec.structs.replace(vol.spec, number_of_replicas=2)))
    world.put(replica("pvc-x", "node-2"))
    step_until(world, "node-1", S.FAILING_REPLICAS)


def test_a_node_that_is_not_ready_waits() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    node = world.get("node", "node-1")
    world.put(
        msgspec.structs.replace(
            node, status=lh.NodeStatus(conditions=(lh.Condition(type="Ready", status="False"),))
        )
    )
    started(world)
    for _ in range(5):
        world.step(tick=1.0)
    assert world.node_upgrades("node-1")[0].status.message == "node node-1 is not ready"


def test_a_node_that_times_out_keeps_its_blocker_in_its_message() -> None:
    """The manager's failure summary quotes the attempt's last message: it says why the node failed."""
    world = cluster(volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=3, max_retries=1))
    node = world.get("node", "node-1")
    world.put(
        msgspec.structs.replace(
            node, status=lh.NodeStatus(conditions=(lh.Condition(type="Ready", status="False"),))
        )
    )
    started(world)
    upgrade = step_until(world, "node-1", S.ERROR)
    assert (upgrade.status.abort_reason, upgrade.status.aborted_in) == ("timeout", S.INITIALIZING)
    assert upgrade.status.message == "aborted (timeout) in initializing: node node-1 is not ready"
    world.run()
    summary = world.get("dataengineupgrademanager", "upgrade").status.upgrade_nodes["node-1"].message
    assert summary == "failed 1 times, last: aborted (timeout) in initializing: node node-1 is not ready"


def test_only_v2_replicas_on_the_node_are_stopped_then_deleted() -> None:
    """§5.6: the prototype stopped and deleted every replica on the node, v1 ones included."""
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(*volume("vol-v1", "node-2", engine="v1"), replica("vol-v1", "node-1", engine="v1"))
    started(world)
    step_until(world, "node-1", S.FAILING_REPLICAS)
    stop = world.step(tick=1.0)
    assert [(c.verb, c.target.name) for c in stop if c.target.kind == "Replica"] == [
        (Verb.PATCH, "vol-a-r-node-1")
    ]
    delete = world.step(tick=1.0)
    assert [(c.verb, c.target.name) for c in delete if c.target.kind == "Replica"] == [
        (Verb.DELETE, "vol-a-r-node-1")
    ]
    step_until(world, "node-1", S.SWITCHING_OVER)
    assert world.get("replica", "vol-v1-r-node-1") is not None
    assert not [c for c in world.applied if "vol-v1" in c.target.name]


def test_the_image_to_restore_is_recorded_before_the_volume_is_touched() -> None:
    """The record goes out with the transition into switching-over (one round trip less per node),
    the volume's patch only in the pass after it."""
    world = started(cluster(volumes={"vol-a": "node-1"}))
    step_until(world, "node-1", S.FAILING_REPLICAS)
    transition = transition_into(world, "node-1", S.SWITCHING_OVER)
    assert [c.target.kind for c in transition if c.target.kind == "Volume"] == []
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.state == S.SWITCHING_OVER
    assert upgrade.status.volumes["vol-a"] == lh.VolumeUpgradeStatus(
        state=S.SWITCHING_OVER, previous_image=OLD, since=rfc3339(world.clock.now)
    )
    second = world.step(tick=1.0)
    [patch] = [c for c in second if c.target.kind == "Volume"]
    assert {c.path: c.value for c in patch.changes} == {
        "/spec/image": NEW,
        "/spec/targetNodeIDForLiveUpgrade": "node-2",
    }


def test_the_targets_are_asked_back_with_the_transition_into_switching_back() -> None:
    """The first pass of switching-back (each volume's target asked back to its node) goes out with
    the transition, not a round trip after it."""
    world = started(cluster(volumes={"vol-a": "node-1"}))
    step_until(world, "node-1", S.UPGRADING_INSTANCE_MANAGER)
    transition = transition_into(world, "node-1", S.SWITCHING_BACK)
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.state == S.SWITCHING_BACK
    assert upgrade.status.volumes["vol-a"].state == S.SWITCHING_BACK
    [patch] = [c for c in transition if c.target.kind == "Volume"]
    assert {c.path: c.value for c in patch.changes} == {"/spec/targetNodeIDForLiveUpgrade": "node-1"}


def test_a_volume_switched_back_has_its_target_cleared_in_the_same_pass() -> None:
    """The record of the switch back and the clear of the target go out together (one round trip
    less per node); a restart between the two counts the volume as done."""
    world = started(cluster(volumes={"vol-a": "node-1"}))
    step_until(world, "node-1", S.SWITCHING_BACK)  # the target asked back with the transition
    commands = world.step(tick=1.0)  # the data plane moved it
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.volumes["vol-a"].state == S.SWITCHED_BACK
    [clear] = [c for c in commands if c.target.kind == "Volume"]
    assert {c.path: c.value for c in clear.changes} == {"/spec/targetNodeIDForLiveUpgrade": ""}
    world.restart()
    step_until(world, "node-1", S.REBUILDING_REPLICA)
    assert world.node_upgrades("node-1")[0].status.volumes["vol-a"].state == S.COMPLETED


def test_an_instance_manager_being_deleted_is_never_deleted_again() -> None:
    world = started(cluster(volumes={"vol-a": "node-1"}))
    step_until(world, "node-1", S.UPGRADING_INSTANCE_MANAGER)
    old = [im for im in world.all("instancemanager") if im.spec.node_id == "node-1" and im.spec.image == OLD]
    [im] = old
    world.put(
        msgspec.structs.replace(
            im, metadata=msgspec.structs.replace(im.metadata, deletion_timestamp="2027-01-01T00:00:00Z")
        )
    )
    world.restart()
    commands = world.decider.decide()
    assert not [c for c in commands if c.target.kind == "InstanceManager"]


def test_rebuilding_waits_for_the_nodes_own_volumes_not_the_whole_cluster() -> None:
    """§5.6: the prototype waited until every non-detached volume in the cluster was healthy."""
    world = cluster(volumes={"vol-a": "node-1"})
    # Degraded elsewhere, nothing on node-1: must not hold node-1.
    world.put(
        *volume("vol-far", "node-2", replicas=3), replica("vol-far", "node-2"), replica("vol-far", "node-3")
    )
    world.stalled.add("vol-far")
    started(world)
    upgrade = step_until(world, "node-1", S.REBUILDING_REPLICA)
    vol_far = world.get("volume", "vol-far")
    world.put(
        msgspec.structs.replace(
            vol_far, status=msgspec.structs.replace(vol_far.status, robustness="degraded")
        )
    )
    vol_a = world.get("volume", "vol-a")
    world.put(
        msgspec.structs.replace(vol_a, status=msgspec.structs.replace(vol_a.status, robustness="degraded"))
    )
    world.step()  # decided on vol-a degraded; then the data plane makes it healthy again
    [upgrade] = world.node_upgrades("node-1")
    assert (upgrade.status.state, upgrade.status.message) == (
        S.REBUILDING_REPLICA,
        "volume vol-a is not healthy yet (degraded)",
    )
    upgrade = step_until(world, "node-1", S.FINALIZING)
    assert world.get("volume", "vol-far").status.robustness == "degraded"


def test_detached_volumes_of_the_node_get_the_new_image_in_finalizing() -> None:
    """V2U-10."""
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(*volume("vol-off", "node-1", attached=False))
    started(world)
    assert world.run() == S.COMPLETED
    assert world.get("volume", "vol-off").spec.image == NEW
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.volumes["vol-off"].state == S.COMPLETED


def test_a_snapshot_is_taken_once_per_attached_volume_and_recorded() -> None:
    """V2U-21: found again by its label after a restart, so never taken twice."""
    world = started(
        cluster(
            volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=0, snapshot_before_upgrade=True)
        )
    )
    step_until(world, "node-1", S.INITIALIZING)
    world.step(tick=1.0)
    [snapshot] = world.all("snapshot")
    [upgrade] = world.node_upgrades("node-1")
    assert snapshot.metadata.labels[FOR_UPGRADE_LABEL] == upgrade.metadata.name
    assert snapshot.spec.volume == "vol-a"
    for _ in range(3):  # not ready yet: waits, and a restarted decider does not take another
        assert not [c for c in world.step(tick=1.0, restart=True) if c.target.kind == "Snapshot"]
    assert world.node_upgrades("node-1")[0].status.message.startswith("waiting for snapshot")
    world.put(msgspec.structs.replace(snapshot, status=lh.SnapshotStatus(ready_to_use=True)))
    upgrade = step_until(world, "node-1", S.FAILING_REPLICAS)
    assert upgrade.status.volumes["vol-a"].snapshot == snapshot.metadata.name
    assert len([c for c in world.applied if c.target.kind == "Snapshot"]) == 1


def test_no_snapshot_by_default() -> None:
    world = started(cluster(volumes={"vol-a": "node-1"}))
    assert world.run() == S.COMPLETED
    assert world.all("snapshot") == []


def test_a_stuck_switch_over_times_out_and_is_restored() -> None:
    """V2U-16: abort with reason timeout, the volume back on its node and its old image, node failed."""
    world = started(
        cluster(volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=30, max_retries=1))
    )
    world.stalled.add("vol-a")
    step_until(world, "node-1", S.SWITCHING_OVER)
    vol = world.get("volume", "vol-a")
    for _ in range(40):
        world.step(tick=1.0)
        if world.node_upgrades("node-1")[0].status.abort_reason:
            break
    [upgrade] = world.node_upgrades("node-1")
    assert (upgrade.status.abort_reason, upgrade.status.aborted_in) == ("timeout", S.SWITCHING_OVER)
    world.stalled.clear()
    upgrade = step_until(world, "node-1", S.ERROR)
    vol = world.get("volume", "vol-a")
    assert (vol.spec.image, vol.status.current_image, vol.spec.target_node_id_for_live_upgrade) == (
        OLD,
        OLD,
        "",
    )
    assert upgrade.status.message == "aborted (timeout) in switching-over; restored"
    # The old IM was never deleted.
    assert not [c for c in world.applied if c.target.kind == "InstanceManager"]


def _lose_im(world: World, node: str) -> None:
    for im in world.all("instancemanager"):
        if im.spec.node_id == node and im.spec.data_engine == "v2":
            world.put(
                msgspec.structs.replace(im, status=msgspec.structs.replace(im.status, current_state="error"))
            )


def test_a_temporary_node_losing_its_im_moves_the_volume_on() -> None:
    """V2U-19: re-planned to another node with a healthy replica, no timeout waited for."""
    world = started(cluster(volumes={"vol-a": "node-1"}, nodes=4, replicas=3))
    world.stalled.add("vol-a")
    step_until(world, "node-1", S.SWITCHING_OVER)
    for _ in range(3):
        world.step(tick=1.0)
    assert world.get("volume", "vol-a").spec.target_node_id_for_live_upgrade == "node-2"
    _lose_im(world, "node-2")
    [move] = [c for c in world.step(tick=1.0) if c.target.kind == "Volume"]
    assert {c.path: c.value for c in move.changes} == {"/spec/targetNodeIDForLiveUpgrade": "node-3"}
    assert "temporary node node-2 lost its instance manager" in move.reason
    world.stalled.clear()
    step_until(world, "node-1", S.COMPLETED)


def test_with_no_node_left_to_take_it_the_upgrade_is_aborted_and_restored_at_once() -> None:
    world = started(cluster(volumes={"vol-a": "node-1"}, nodes=2, replicas=2))
    world.stalled.add("vol-a")
    step_until(world, "node-1", S.SWITCHING_OVER)
    for _ in range(3):
        world.step(tick=1.0)
    _lose_im(world, "node-2")
    world.step(tick=1.0)
    [upgrade] = world.node_upgrades("node-1")
    assert (upgrade.status.abort_reason, upgrade.status.state) == ("temporary-node-lost", S.SWITCHING_BACK)
    world.stalled.clear()
    step_until(world, "node-1", S.ERROR)
    vol = world.get("volume", "vol-a")
    assert (vol.spec.image, vol.spec.target_node_id_for_live_upgrade) == (OLD, "")


def test_an_abort_after_the_old_im_is_gone_brings_the_volume_back_on_the_new_image() -> None:
    world = started(cluster(volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=30)))
    step_until(world, "node-1", S.UPGRADING_INSTANCE_MANAGER)
    world.step(tick=1.0)  # the old IM is deleted
    assert not [
        im for im in world.all("instancemanager") if im.spec.node_id == "node-1" and im.spec.image == OLD
    ]
    upgrade = step_until(world, "node-1", S.SWITCHING_BACK)
    created = parse_time(upgrade.metadata.creation_timestamp)
    assert created is not None
    world.clock.now = created + 31  # past the timeout, within the restore's: aborted while switching back
    upgrade = step_until(world, "node-1", S.ERROR)
    assert (upgrade.status.abort_reason, upgrade.status.aborted_in) == ("timeout", S.SWITCHING_BACK)
    assert upgrade.status.message.endswith("; restored")
    vol = world.get("volume", "vol-a")
    assert (vol.spec.image, vol.status.current_image, vol.spec.target_node_id_for_live_upgrade) == (
        NEW,
        NEW,
        "",
    )


def _abort_after_the_old_im_is_gone(world: World) -> None:
    """node-1's first attempt times out in switching-back, its old IM already deleted: the restore
    brings vol-a home on the new image, and the attempt ends in `error`."""
    upgrade = step_until(world, "node-1", S.SWITCHING_BACK)
    created = parse_time(upgrade.metadata.creation_timestamp)
    assert created is not None
    world.clock.now = created + 31
    step_until(world, "node-1", S.ERROR)
    vol = world.get("volume", "vol-a")
    assert (vol.spec.image, vol.status.current_image, vol.spec.target_node_id_for_live_upgrade) == (
        NEW,
        NEW,
        "",
    )


def _retry(world: World) -> lh.NodeDataEngineUpgrade:
    [retry] = [u for u in world.node_upgrades("node-1") if not u.status.abort_reason]
    return retry


def _retry_reaches(world: World, state: str) -> lh.NodeDataEngineUpgrade:
    for _ in range(30):
        retries = [u for u in world.node_upgrades("node-1") if not u.status.abort_reason]
        if retries and retries[0].status.state == state:
            return retries[0]
        world.step(tick=1.0)
    raise AssertionError(
        f"node-1's retry never reached {state}: {[u.status for u in world.node_upgrades('node-1')]}"
    )


def _targets_asked(commands: list[Command]) -> list[str]:
    return [
        str(c.value)
        for command in commands
        if command.target.kind == "Volume"
        for c in command.changes
        if c.path == "/spec/targetNodeIDForLiveUpgrade" and c.value
    ]


def test_a_retry_counts_a_volume_already_on_the_new_image_as_switched_without_a_target() -> None:
    """V2U-19's retry: the aborted attempt restored vol-a at home on the new image, and §5.3 refuses
    a target for a volume already on it ("already using instance manager image"), so the retry asks
    for none: the volume is done in switching-over, and the node completes."""
    world = started(cluster(volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=30)))
    _abort_after_the_old_im_is_gone(world)
    before = len(world.applied)
    assert world.run() == S.COMPLETED
    assert _targets_asked(world.applied[before:]) == []
    retry = _retry(world)
    assert retry.status.state == S.COMPLETED
    assert retry.status.volumes["vol-a"].state == S.COMPLETED
    assert retry.status.volumes["vol-a"].message == f"already on instance manager image {NEW}"


def test_a_volume_on_the_new_image_whose_engine_is_not_in_its_im_yet_is_waited_for() -> None:
    """The image is new but the engine is not (yet) listed by a running IM of it at home: no target
    asked (§5.3 would refuse it), the attempt waits, and goes on once the IM holds the engine."""
    world = started(cluster(volumes={"vol-a": "node-1"}, config=DeciderConfig(node_timeout=30)))
    _abort_after_the_old_im_is_gone(world)
    [new_im] = [
        im for im in world.all("instancemanager") if im.spec.node_id == "node-1" and im.spec.image == NEW
    ]
    held = new_im.status.instance_engines
    world.put(
        msgspec.structs.replace(new_im, status=msgspec.structs.replace(new_im.status, instance_engines={}))
    )
    before = len(world.applied)
    _retry_reaches(world, S.SWITCHING_OVER)
    for _ in range(3):
        world.step(tick=1.0)
    retry = _retry(world)
    assert retry.status.state == S.SWITCHING_OVER
    assert retry.status.message == f"volume vol-a is on image {NEW}, its engine not running there yet"
    assert _targets_asked(world.applied[before:]) == []
    new_im = world.get("instancemanager", new_im.metadata.name)
    world.put(
        msgspec.structs.replace(new_im, status=msgspec.structs.replace(new_im.status, instance_engines=held))
    )
    assert world.run() == S.COMPLETED
    assert _targets_asked(world.applied[before:]) == []
