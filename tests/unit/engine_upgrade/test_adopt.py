"""`adopt`: a replica counts the commands another replica issued, so a new leader never
exceeds the per-node limit with its predecessor's commands still on their way. Two deciders are fed
the same events, as two replicas following LH_OBJECTS are; one decides, the other adopts."""

from __future__ import annotations

import msgspec

from corral_decision import Timing
from corral_engine_upgrade.core import DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING
from corral_model import longhorn as lh
from corral_model.envelopes import Command, FieldValue, Outcome, Target, Verb, new_command
from tests.unit.engine_upgrade.cluster import (
    NEW,
    OLD,
    Clock,
    Feed,
    engine_image,
    longhorn_node,
    names,
    ready_cluster,
    replica,
    result,
    setting,
    upgraded,
    volume,
)

NODES = ("n1", "n2", "n3")


class Pair:
    """Leader and standby replicas over the same event stream (same resourceVersions)."""

    def __init__(self, clock: Clock, limit: str = "2", config: DeciderConfig | None = None) -> None:
        self.leader, self.leader_feed = ready_cluster(clock, limit=limit, config=config)
        self.standby, self.standby_feed = ready_cluster(clock, limit=limit, config=config)

    def put(self, *objs: lh.Volume | lh.Replica) -> None:
        self.leader_feed.put(*objs)
        self.standby_feed.put(*objs)

    def delete(self, obj: lh.Volume) -> None:
        self.leader_feed.delete(obj)
        self.standby_feed.delete(obj)

    def volumes(self, *vols: lh.Volume) -> None:
        for vol in vols:
            self.put(vol, *(replica(vol.metadata.name, i, n) for i, n in enumerate(NODES)))


def on_n1(count: int) -> list[lh.Volume]:
    return [volume(f"v{i}") for i in range(1, count + 1)]


def test_a_standby_that_adopted_the_leaders_commands_fills_no_slot_they_hold() -> None:
    clock = Clock()
    pair = Pair(clock)
    vols = on_n1(4)
    pair.volumes(*vols)
    issued = pair.leader.decide()
    assert names(issued) == ["v1", "v2"]
    for command in issued:
        pair.standby.adopt(command, None)
    assert pair.standby.in_flight_by_node() == {"n1": 2}
    # The standby takes over: everything on n1 is in flight, so it decides nothing there.
    pair.standby.reconsider_all()
    assert pair.standby.decide() == []
    assert pair.standby.pending_commands() == 2


def test_without_adoption_the_new_leader_would_exceed_the_limit() -> None:
    """The hole adopt closes: the same handover, nothing adopted."""
    clock = Clock()
    pair = Pair(clock)
    pair.volumes(*on_n1(4))
    assert names(pair.leader.decide()) == ["v1", "v2"]
    pair.standby.reconsider_all()
    assert len(pair.standby.decide()) == 2  # two more on n1 while two are on their way: 4 > 2


def test_own_command_coming_back_on_the_bus_changes_nothing() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1")
    feed.put(volume("v1"), volume("v2"))
    [command] = decider.decide()
    expectation = decider.view.volume("longhorn-system", "v1").expectation  # type: ignore[union-attr]
    decider.adopt(command, None)
    decider.adopt(command, None)
    assert decider.view.volume("longhorn-system", "v1").expectation is expectation  # type: ignore[union-attr]
    assert decider.in_flight_by_node() == {"n1": 1}
    # Its refusal still settles it, exactly once.
    decider.record_result(result(command, Outcome.PRECONDITION_FAILED))
    assert decider.in_flight_by_node() == {}


def test_the_same_foreign_command_adopted_twice_counts_once() -> None:
    clock = Clock()
    pair = Pair(clock, limit="3")
    pair.volumes(*on_n1(2))
    [first, _] = pair.leader.decide()
    pair.standby.adopt(first, None)
    pair.standby.adopt(first, None)
    assert pair.standby.in_flight_by_node() == {"n1": 1}


def test_a_command_the_view_already_reflects_is_counted_by_the_view_only() -> None:
    """Out of order: the volume's new spec.image arrived before the command itself."""
    clock = Clock()
    pair = Pair(clock, limit="1")
    vols = on_n1(2)
    pair.volumes(*vols)
    [command] = pair.leader.decide()
    pair.put(upgraded(vols[0]))  # spec.image = NEW, upgrade running
    pair.standby.adopt(command, None)
    assert pair.standby.pending_commands() == 0
    assert pair.standby.in_flight_by_node() == {"n1": 1}  # from the view
    # When the upgrade finishes the slot frees at once: no expectation lingers until command_ttl.
    pair.put(upgraded(vols[0], done=True))
    pair.standby.reconsider_all()
    assert names(pair.standby.decide()) == ["v2"]


def test_a_command_whose_other_preconditions_fail_now_still_holds_its_slot_until_refused() -> None:
    """The volume is degraded now, but may be healthy again before the actuator reaches the
    command, which would then apply: it must hold its slot until its refusal actually arrives.
    (Found by the handover property test: skipping it let a second command onto a node of limit 1.)"""
    clock = Clock()
    pair = Pair(clock, limit="1")
    vols = on_n1(2)
    pair.volumes(*vols)
    [command] = pair.leader.decide()  # a live upgrade: tests attached + healthy
    pair.put(volume("v1", robustness="degraded"))
    pair.standby.adopt(command, None)
    assert pair.standby.in_flight_by_node() == {"n1": 1}
    pair.put(volume("v1"))  # healthy again: the command could apply after all
    pair.standby.reconsider_all()
    assert pair.standby.decide() == []
    pair.standby.record_result(result(command, Outcome.PRECONDITION_FAILED))
    pair.standby.reconsider_all()
    assert names(pair.standby.decide()) == ["v1"]  # freed, and re-decided from its fresher state


def test_a_command_testing_an_image_the_volume_has_left_is_not_adopted() -> None:
    """Its spec.image test can never pass again (the image does not move back by itself)."""
    clock = Clock()
    pair = Pair(clock, limit="1")
    vols = on_n1(2)
    pair.volumes(*vols)
    [command] = pair.leader.decide()
    pair.put(upgraded(vols[0], image="longhornio/longhorn-engine:elsewhere", done=True))
    pair.standby.adopt(command, None)
    assert pair.standby.pending_commands() == 0
    pair.standby.reconsider_all()
    assert names(pair.standby.decide()) == ["v2"]


def test_a_command_for_a_deleted_or_unknown_volume_is_ignored() -> None:
    clock = Clock()
    pair = Pair(clock, limit="1")
    vols = on_n1(2)
    pair.volumes(*vols)
    [command] = pair.leader.decide()
    pair.delete(vols[0])
    pair.standby.adopt(command, None)
    stranger = msgspec.structs.replace(command, target=Target(kind="Volume", namespace="x", name="nope"))
    pair.standby.adopt(stranger, None)
    assert pair.standby.in_flight_by_node() == {}
    pair.standby.reconsider_all()
    assert names(pair.standby.decide()) == ["v2"]


def test_an_adopted_command_is_released_when_its_volume_is_deleted() -> None:
    clock = Clock()
    pair = Pair(clock, limit="1")
    vols = on_n1(2)
    pair.volumes(*vols)
    [command] = pair.leader.decide()
    pair.standby.adopt(command, None)
    assert pair.standby.in_flight_by_node() == {"n1": 1}
    pair.delete(vols[0])
    assert pair.standby.in_flight_by_node() == {}
    pair.standby.reconsider_all()
    assert names(pair.standby.decide()) == ["v2"]


def test_an_adopted_command_is_settled_by_results_like_our_own() -> None:
    clock = Clock()
    pair = Pair(clock, limit="1")
    vols = on_n1(3)
    pair.volumes(*vols)
    [command] = pair.leader.decide()
    standby = pair.standby
    standby.adopt(command, None)
    standby.reconsider_all()
    # applied, but the view lags: still in flight
    standby.record_result(result(command, Outcome.APPLIED))
    assert standby.decide() == [] and standby.in_flight_by_node() == {"n1": 1}
    # the view catches up, the upgrade finishes: the slot goes to the next volume
    pair.put(upgraded(vols[0]))
    assert standby.in_flight_by_node() == {"n1": 1} and standby.pending_commands() == 0
    pair.put(upgraded(vols[0], done=True))
    [next_command] = standby.decide()
    assert next_command.target.name == "v2"


def test_a_refusal_frees_an_adopted_slot() -> None:
    clock = Clock()
    pair = Pair(clock, limit="1")
    pair.volumes(*on_n1(3))
    [command] = pair.leader.decide()
    pair.standby.adopt(command, None)
    pair.standby.record_result(result(command, Outcome.PRECONDITION_FAILED))
    assert pair.standby.in_flight_by_node() == {}
    pair.standby.reconsider_all()
    # v1 waits for fresher state (as the issuer would); the freed slot goes to v2
    assert names(pair.standby.decide()) == ["v2"]


def test_an_adopted_command_with_no_result_expires_after_command_ttl() -> None:
    clock = Clock()
    pair = Pair(clock, limit="1", config=DeciderConfig(timing=Timing(command_ttl=60.0, retry_backoff=1.0)))
    pair.volumes(*on_n1(2))
    [command] = pair.leader.decide()
    pair.standby.adopt(command, None)
    pair.standby.reconsider_all()
    assert pair.standby.decide() == []
    clock.advance(59.0)
    assert pair.standby.decide() == [] and pair.standby.in_flight_by_node() == {"n1": 1}
    clock.advance(2.0)
    assert names(pair.standby.decide()) == ["v1"]  # presumed lost, as the issuer presumes


def test_a_command_sent_again_by_another_replica_counts_until_the_copys_own_ttl() -> None:
    """The same decision re-sent later (same id) by a replica that missed the first: that copy may
    reach the actuator until its own TTL, so the slot stays held that long (found by
    test_adopt_properties: a handover back exceeded the limit when the first copy's TTL ran out)."""
    clock = Clock()
    config = DeciderConfig(timing=Timing(command_ttl=60.0, retry_backoff=1.0))
    pair = Pair(clock, limit="1", config=config)
    pair.volumes(*on_n1(2))
    [command] = pair.leader.decide()
    clock.advance(40.0)
    pair.leader.adopt(command, None)  # the other replica's copy of it, 40 s later
    clock.advance(30.0)  # past the first copy's TTL, within the second's
    assert pair.leader.decide() == [] and pair.leader.in_flight_by_node() == {"n1": 1}
    clock.advance(31.0)
    assert names(pair.leader.decide()) == ["v1"]


def test_commands_that_are_not_engine_upgrades_are_ignored() -> None:
    clock = Clock()
    pair = Pair(clock, limit="1")
    pair.volumes(*on_n1(1))
    target = Target(kind="Volume", namespace="longhorn-system", name="v1")
    tests = (FieldValue(path="/spec/image", value=OLD),)
    change = (FieldValue(path="/spec/image", value=NEW),)
    others: list[Command] = [
        new_command(
            service="setting-sync", verb=Verb.PATCH, target=target, changes=change, preconditions=tests
        ),
        new_command(service="engine-upgrade", verb=Verb.DELETE, target=target, preconditions=tests),
        new_command(
            service="engine-upgrade",
            verb=Verb.PATCH,
            target=Target(kind="Engine", namespace="longhorn-system", name="v1"),
            changes=change,
            preconditions=tests,
        ),
        # no spec.image precondition: not what this decider issues
        new_command(service="engine-upgrade", verb=Verb.PATCH, target=target, changes=change),
        # changes nothing about the image
        new_command(
            service="engine-upgrade",
            verb=Verb.PATCH,
            target=target,
            changes=(FieldValue(path="/spec/image", value=OLD),),
            preconditions=tests,
        ),
    ]
    for command in others:
        pair.standby.adopt(command, None)
    assert pair.standby.in_flight_by_node() == {}


def test_an_adopted_command_counts_on_the_volumes_owner_node() -> None:
    clock = Clock()
    pair = Pair(clock, limit="1")
    pair.volumes(volume("a", owner="n2"), volume("b", owner="n2"), volume("c", owner="n3"))
    issued = pair.leader.decide()
    assert sorted(names(issued)) == ["a", "c"]
    for command in issued:
        pair.standby.adopt(command, None)
    assert pair.standby.in_flight_by_node() == {"n2": 1, "n3": 1}
    pair.standby.reconsider_all()
    assert pair.standby.decide() == []


def test_adoption_is_safe_before_the_view_is_complete() -> None:
    """A standby still bootstrapping may see commands first; they count once it starts deciding."""
    clock = Clock()
    leader, leader_feed = ready_cluster(clock, limit="1")
    vols = on_n1(2)
    for vol in vols:
        leader_feed.put(vol)
    [command] = leader.decide()
    standby = EngineUpgradeDecider(clock)
    feed = Feed(standby)
    feed.rv = leader_feed.rv
    for vol in vols:
        feed.put(vol)
    standby.adopt(command, None)
    # the rest of the view arrives: the same cluster the leader decided on
    feed.put(*(longhorn_node(n) for n in NODES))
    feed.put(engine_image(OLD, api=5), engine_image(NEW))
    feed.put(setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, "1"))
    feed.resync()
    assert standby.ready
    assert standby.decide() == []
    assert standby.in_flight_by_node() == {"n1": 1}
