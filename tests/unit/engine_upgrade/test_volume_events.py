"""Status inside the cluster: the decider's Events on each Volume (started, completed, blocked
with the reason), one per transition however many passes and events go by, and the limit that
comes from corral's configuration beside a running longhorn-manager."""

from __future__ import annotations

from typing import Any

from corral_decision.events import OCCURRENCE_PATH
from corral_engine_upgrade.core import DeciderConfig
from corral_engine_upgrade.view import LIMIT_SETTING
from corral_model.envelopes import Command
from tests.unit.engine_upgrade.cluster import (
    NEW,
    OLD,
    Clock,
    names,
    ready_cluster,
    setting,
    upgraded,
    volume,
)

ANNOUNCING = DeciderConfig(announce=True)


def split(commands: list[Command]) -> tuple[list[Command], list[dict[str, Any]]]:
    """(upgrade commands, Event bodies)."""
    upgrades = [c for c in commands if c.target.kind != "Event"]
    return upgrades, [c.body for c in commands if c.target.kind == "Event" and c.body is not None]


def about(bodies: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(b["involvedObject"]["name"], b["type"], b["reason"]) for b in bodies]


def test_an_upgrade_is_announced_when_it_starts_and_when_it_completes_once_each() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, config=ANNOUNCING)
    v1 = volume("v1")
    feed.volume_with_replicas(v1)
    upgrades, bodies = split(decider.decide())
    assert names(upgrades) == ["v1"] and bodies == []  # commanded, not started yet

    feed.put(upgraded(v1))  # the actuator's patch lands: the upgrade is under way
    upgrades, bodies = split(decider.decide())
    assert about(bodies) == [("v1", "Normal", "EngineUpgradeStarted")]
    assert bodies[0]["message"] == (
        f"automatic engine upgrade started (live): {OLD} -> {NEW} (owner node n1)"
    )
    feed.put(upgraded(v1))  # more updates of the same volume: nothing new to say
    clock.advance(5)
    assert decider.decide() == []

    feed.put(upgraded(v1, done=True))
    _, bodies = split(decider.decide())
    assert about(bodies) == [("v1", "Normal", "EngineUpgradeCompleted")]
    assert bodies[0]["message"] == f"automatic engine upgrade completed: now on {NEW}"
    feed.put(upgraded(v1, done=True))
    assert decider.decide() == []


def test_a_blocked_volume_is_announced_with_its_reason_once_until_it_unblocks() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, config=ANNOUNCING)
    degraded = volume("v1", robustness="degraded")
    feed.volume_with_replicas(degraded)
    _, bodies = split(decider.decide())
    assert about(bodies) == [("v1", "Warning", "EngineUpgradeBlocked")]
    assert bodies[0]["message"] == f"automatic engine upgrade to {NEW} blocked: degraded"

    feed.put(volume("v1", robustness="faulted"))  # another reason: a new Event
    _, bodies = split(decider.decide())
    assert [b["message"].rsplit(": ", 1)[1] for b in bodies] == ["not-healthy"]
    feed.put(volume("v1", robustness="faulted"))
    assert split(decider.decide())[1] == []

    feed.put(volume("v1"))  # healthy again: it is upgraded, and that is announced
    upgrades, bodies = split(decider.decide())
    assert names(upgrades) == ["v1"] and bodies == []
    feed.put(volume("v1", robustness="degraded", image=NEW, current=OLD))
    _, bodies = split(decider.decide())
    assert about(bodies) == [("v1", "Normal", "EngineUpgradeStarted")]


def test_nothing_is_announced_while_the_loop_is_disabled_or_without_the_flag() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, limit="0", config=ANNOUNCING)
    feed.volume_with_replicas(volume("v1", robustness="degraded"))
    assert decider.decide() == []
    feed.put(setting(LIMIT_SETTING, "2"))  # switched on: what was judged while off is reported now
    assert about(split(decider.decide())[1]) == [("v1", "Warning", "EngineUpgradeBlocked")]

    quiet, quiet_feed = ready_cluster(Clock())
    quiet_feed.volume_with_replicas(volume("v1", robustness="degraded"))
    quiet_feed.volume_with_replicas(volume("v2"))
    assert [c.target.kind for c in quiet.decide()] == ["Volume"]


def test_a_repeated_event_is_the_same_event_at_a_new_occurrence() -> None:
    clock = Clock()
    decider, feed = ready_cluster(clock, config=ANNOUNCING)
    feed.volume_with_replicas(volume("v1", robustness="degraded"))
    [first] = decider.decide()
    feed.put(volume("v1", robustness="healthy", state="detaching"))  # not blocked for a moment
    assert [c.target.kind for c in decider.decide()] == []
    clock.advance(60)
    feed.put(volume("v1", robustness="degraded"))
    [again] = decider.decide()
    assert again.target == first.target  # the same Event name: the actuator increments its count
    assert again.id != first.id  # a new occurrence, not a redelivery JetStream would drop
    assert [p.path for p in again.preconditions] == [OCCURRENCE_PATH]
    assert again.body is not None and first.body is not None
    assert again.body["lastTimestamp"] > first.body["lastTimestamp"]


def test_beside_longhorn_the_limit_is_corrals_and_longhorns_setting_only_says_whether_its_loop_runs() -> None:
    ready, ready_feed = ready_cluster(Clock(), limit="0", config=DeciderConfig(limit_override=1))
    for name in ("v1", "v2", "v3"):
        ready_feed.volume_with_replicas(volume(name))
    assert ready.view.longhorn_limit == 0
    assert names(ready.decide()) == ["v1"]  # 1 per owner node, whatever Longhorn's setting says
    ready_feed.put(setting(LIMIT_SETTING, "3"))
    assert ready.view.longhorn_limit == 3 and ready.view.limit == 1
    assert ready.decide() == []
