"""Why a setting is pending, as Warning Events on the Setting: one naming the blocker when it starts
blocking, a new one when the blockers change (at most every `event_interval`), none once applied, and
the same blocker later is the same Event (same name) reported as a later occurrence."""

from __future__ import annotations

from typing import Any

from corral_model.envelopes import Command
from tests.unit.setting_sync.cluster import Cluster, component_pod, setting, volume

TOLERATION = "key1=value1:NoSchedule"


def blocked_cluster() -> Cluster:
    cluster = Cluster()
    cluster.put(
        component_pod("instance-manager-n1"),
        volume("pvc-a", "attached"),
        volume("pvc-b", "attached"),
        setting("taint-toleration", TOLERATION, applied=True),
    )
    cluster.resync()
    return cluster


def body(command: Command) -> dict[str, Any]:
    assert command.body is not None
    return command.body


def settle_timers(cluster: Cluster, seconds: float) -> list[Command]:
    """Let `seconds` pass and decide at the due timers, as the runner does."""
    cluster.now += seconds
    cluster.decide()
    return cluster.events


def test_a_blocked_setting_gets_a_warning_event_naming_its_blockers() -> None:
    cluster = blocked_cluster()
    cluster.carry_out(cluster.decide())
    [event] = cluster.events
    b = body(event)
    assert (b["type"], b["reason"], b["message"]) == (
        "Warning",
        "AttachedVolumes",
        "2 attached volumes: pvc-a, pvc-b",
    )
    assert b["involvedObject"]["kind"] == "Setting" and b["involvedObject"]["name"] == "taint-toleration"
    assert event.target.name.startswith("taint-toleration.") and b["count"] == 1


def test_changed_blockers_are_a_new_event_at_most_every_interval() -> None:
    cluster = blocked_cluster()
    cluster.carry_out(cluster.decide())
    cluster.put(volume("pvc-c", "attached"))
    cluster.decide()
    cluster.put(volume("pvc-a", "detached"))
    cluster.decide()
    assert len(cluster.events) == 1  # within the interval: nothing yet
    events = settle_timers(cluster, cluster.decider.config.event_interval)
    assert [body(e)["message"] for e in events] == [
        "2 attached volumes: pvc-a, pvc-b",
        "2 attached volumes: pvc-b, pvc-c",  # as it stands at the interval, once
    ]
    assert events[0].target.name != events[1].target.name


def test_no_event_once_nothing_blocks_and_the_same_blocker_later_is_the_same_event() -> None:
    cluster = blocked_cluster()
    cluster.carry_out(cluster.decide())
    first = cluster.events[0]
    cluster.put(volume("pvc-a", "detached"), volume("pvc-b", "detached"))
    cluster.carry_out(cluster.decide())
    settle_timers(cluster, 10)
    assert len(cluster.events) == 1  # applying, then applied: not a blocker
    cluster.put(setting("taint-toleration", "", applied=True))
    cluster.carry_out(cluster.decide())
    cluster.put(volume("pvc-a", "attached"), volume("pvc-b", "attached"))
    cluster.decide()
    cluster.put(setting("taint-toleration", TOLERATION, applied=True))
    cluster.carry_out(cluster.decide())
    events = settle_timers(cluster, 10)
    again = events[-1]
    assert again.target.name == first.target.name  # same reason and message: the same Event
    assert body(again)["count"] == 2 and again.id != first.id  # a later occurrence, counted


def test_an_invalid_value_is_reported_with_longhorns_message() -> None:
    cluster = Cluster()
    cluster.put(setting("taint-toleration", "key2:InvalidEffect", applied=True))
    cluster.resync()
    cluster.decide()
    [event] = cluster.events
    assert body(event)["reason"] == "InvalidValue" and "invalid effect" in body(event)["message"]
