"""Stuck is a state with a name (issue 30, item 1): an upgrade in flight past its bound is named
stuck, with its evidence, once, through the kit's own wake; the slot it holds stays counted and is
shown per owner node."""

from __future__ import annotations

from typing import Any

from corral_engine_upgrade.core import DeciderConfig
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.stuck import STUCK_EVENT, StuckBounds
from corral_model.envelopes import Command
from tests.unit.engine_upgrade.cluster import NEW, OLD, Clock, names, ready_cluster, upgraded, volume

BOUNDS = StuckBounds(live=100.0, offline=30.0)
CONFIG = DeciderConfig(announce=True, stuck=BOUNDS)


def stuck_events(commands: list[Command]) -> list[dict[str, Any]]:
    return [
        c.body
        for c in commands
        if c.target.kind == "Event" and c.body is not None and c.body["reason"] == STUCK_EVENT
    ]


def upgrades(commands: list[Command]) -> list[str]:
    return sorted(names([c for c in commands if c.target.kind == "Volume"]))


def explained(decider: Any, name: str) -> tuple[str, str]:
    (explanation,) = decider.explain(f"Volume/longhorn-system/{name}")
    return str(explanation.reason), explanation.detail


def test_a_live_upgrade_past_its_bound_is_named_stuck_once_with_its_evidence() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=CONFIG)
    v1 = volume("v1")
    feed.volume_with_replicas(v1)
    feed.volume_with_replicas(volume("v2"))
    assert upgrades(decider.decide()) == ["v1"]
    feed.put(upgraded(v1))  # under way from now on
    decider.decide()

    clock.advance(99)
    assert stuck_events(decider.decide()) == []
    assert decider.next_due() == 1100.0  # the kit wakes the decider at the bound
    assert explained(decider, "v1")[0] == Reason.IN_PROGRESS

    clock.advance(1)
    commands = decider.decide()
    (event,) = stuck_events(commands)
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "v1"
    message = event["message"]
    assert message.startswith("engine upgrade stuck: in flight 100s, past the 100s bound of a live upgrade")
    assert f"spec.image {NEW}, status.currentImage still {OLD}" in message
    assert "robustness healthy, 3 replica(s) on n1, n2, n3; holds a slot on owner node n1" in message
    reason, detail = explained(decider, "v1")
    assert reason == Reason.STUCK and "holds a slot on owner node n1" in detail
    assert decider.stuck_by_node() == {"n1": 1}
    # it still holds its slot: v2, on the same owner node, does not start
    assert upgrades(commands) == []
    clock.advance(1000)
    assert stuck_events(decider.decide()) == []  # named once

    feed.put(upgraded(v1, done=True))  # the volume controller finished it after all
    assert upgrades(decider.decide()) == ["v2"]
    assert decider.stuck_by_node() == {}
    assert explained(decider, "v1")[0] == Reason.ALREADY_DEFAULT


def test_an_offline_upgrade_has_its_own_bound_and_an_upgrade_that_ends_in_time_is_never_stuck() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="2", config=CONFIG)
    detached, attached = volume("off", state="detached"), volume("on")
    feed.volume_with_replicas(detached)
    feed.volume_with_replicas(attached)
    assert upgrades(decider.decide()) == ["off", "on"]
    feed.put(upgraded(detached), upgraded(attached))
    clock.advance(30)
    (event,) = stuck_events(decider.decide())
    assert event["involvedObject"]["name"] == "off"
    assert "in flight 30s, past the 30s bound of an offline upgrade" in event["message"]
    feed.put(upgraded(attached, done=True))  # done well within its 100 s
    clock.advance(500)
    assert stuck_events(decider.decide()) == []
    assert decider.stuck_by_node() == {"n1": 1}


def test_an_upgrade_in_flight_at_bootstrap_is_timed_from_when_it_was_first_seen() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="0", config=CONFIG)
    feed.volume_with_replicas(volume("v1", image=NEW, current=OLD))  # Longhorn's own, under way
    clock.advance(100)
    (event,) = stuck_events(decider.decide())
    assert event["involvedObject"]["name"] == "v1"


def test_a_deleted_stuck_volume_frees_its_name() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="1", config=CONFIG)
    v1 = volume("v1", image=NEW, current=OLD)
    feed.volume_with_replicas(v1)
    clock.advance(100)
    decider.decide()
    assert decider.stuck_by_node() == {"n1": 1}
    feed.delete(v1)
    assert decider.stuck_by_node() == {}
