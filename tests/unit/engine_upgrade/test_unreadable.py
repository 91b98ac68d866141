"""UNREADABLE markers: a volume whose latest version does not decode is held back (`unreadable`),
shown by explain with the decoder's message, and decided again once a readable version arrives.
Markers of the other kinds change nothing."""

from __future__ import annotations

from typing import Any

from corral_engine_upgrade.reasons import Reason
from corral_model.envelopes import EventType, ObjectEvent
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NS,
    Clock,
    Feed,
    engine_image,
    names,
    ready_cluster,
    upgraded,
    volume,
)

WHY = "Expected `str`, got `int` - at `$.spec.numberOfReplicas`"


def unreadable(feed: Feed, kind: str, name: str, rv: int | None = None) -> ObjectEvent[Any]:
    if rv is None:
        feed.rv += 1
        rv = feed.rv
    return ObjectEvent(
        type=EventType.UNREADABLE,
        kind=kind,
        namespace=NS,
        name=name,
        uid=f"uid-{name}",
        resource_version=str(rv),
        reason=WHY,
    )


def explained(feed: Feed) -> dict[str, tuple[str, str]]:
    return {e.name: (e.reason, e.detail) for e in feed.decider.explain()}


def test_an_unreadable_candidate_is_held_back_then_decided_once_readable() -> None:
    decider, feed = ready_cluster(Clock())
    for name in ("v1", "v2"):
        feed.volume_with_replicas(volume(name))
    decider.apply(unreadable(feed, "volume", "v1"))
    assert names(decider.decide()) == ["v2"]
    assert explained(feed)["v1"] == (Reason.UNREADABLE, WHY)
    feed.put(volume("v1"))  # a readable version, newer
    assert "v1" not in {e.name for e in decider.explain() if e.reason is Reason.UNREADABLE}
    assert names(decider.decide()) == ["v1"]


def test_a_volume_known_only_by_its_marker_is_reported_and_holds_no_slot() -> None:
    decider, feed = ready_cluster(Clock(), limit="1")
    decider.apply(unreadable(feed, "volume", "never-read"))
    feed.volume_with_replicas(volume("v1"))
    assert names(decider.decide()) == ["v1"]
    assert explained(feed)["never-read"] == (Reason.UNREADABLE, WHY)
    assert decider.in_flight_by_node() == {"n1": 1}


def test_an_upgrade_under_way_keeps_its_slot_while_unreadable() -> None:
    """Its engine may still be switching: counting it is what keeps the node within its limit."""
    decider, feed = ready_cluster(Clock(), limit="1")
    feed.volume_with_replicas(upgraded(volume("v1")))  # spec.image NEW, currentImage OLD: in flight
    feed.volume_with_replicas(volume("v2"))
    decider.apply(unreadable(feed, "volume", "v1"))
    assert decider.decide() == []
    assert decider.in_flight_by_node() == {"n1": 1}
    assert explained(feed)["v1"][0] is Reason.UNREADABLE
    feed.put(upgraded(volume("v1"), done=True))
    assert names(decider.decide()) == ["v2"]


def test_an_older_marker_is_ignored_and_a_deletion_removes_the_volume() -> None:
    decider, feed = ready_cluster(Clock())
    feed.volume_with_replicas(volume("v1"))
    held = feed.rv
    decider.apply(unreadable(feed, "volume", "v1", rv=held - 3))  # older than the volume held
    assert "v1" not in {e.name for e in decider.explain() if e.reason is Reason.UNREADABLE}
    decider.apply(unreadable(feed, "volume", "v1"))
    feed.delete(volume("v1"))
    assert "v1" not in explained(feed)
    assert decider.decide() == []


def test_markers_of_other_kinds_keep_the_last_known_state() -> None:
    decider, feed = ready_cluster(Clock())
    feed.volume_with_replicas(volume("v1"))
    for kind, name in (
        ("engineimage", "ei-whatever"),
        ("setting", "default-engine-image"),
        ("node", "n1"),
        ("replica", "v1-r-00000000"),
    ):
        decider.apply(unreadable(feed, kind, name))
    assert decider.view.default_image == NEW
    assert names(decider.decide()) == ["v1"]


def test_the_default_image_gate_does_not_hide_an_unreadable_volume() -> None:
    decider, feed = ready_cluster(Clock())
    feed.delete(engine_image(NEW))  # the default image is gone: every volume is gated
    feed.volume_with_replicas(volume("v1"))
    decider.apply(unreadable(feed, "volume", "v2"))
    reasons = explained(feed)
    assert reasons["v1"][0] is Reason.DEFAULT_IMAGE_MISSING
    assert reasons["v2"] == (Reason.UNREADABLE, WHY)
