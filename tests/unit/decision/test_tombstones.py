"""A late event of an object after its delete must not bring it back into a decider's view. The
kit's `DeciderBase.observe` forgot a deleted object's resourceVersion, so an older event delivered
after the delete (a replay, a duplicate, an out-of-order copy) passed as new and resurrected it:
v2-upgrade would step a node upgrade that is gone, setting-sync judge a pod that is gone. The delete
now leaves a tombstone (its resourceVersion, for `TOMBSTONE_TTL`)."""

from __future__ import annotations

from typing import Any

from corral_decision.base import DeciderBase
from corral_model.envelopes import Command, EventType, ObjectEvent
from corral_model.longhorn import ObjectMeta, Setting

NS = "longhorn-system"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Viewer(DeciderBase):
    """Only a view: what `observe` lets through is held, a delete removes it."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(clock, reads=["setting"])
        self.held: dict[str, str] = {}

    def apply(self, event: ObjectEvent[Any]) -> None:
        if self.observe(event) is None:
            return
        if event.type is EventType.DELETED or event.object is None:
            self.held.pop(event.name, None)
        else:
            self.held[event.name] = event.object.value

    def reconcile(self, now: float) -> list[Command]:
        return []


def event(kind: EventType, rv: int, value: str = "x", name: str = "s") -> ObjectEvent[Any]:
    obj = Setting(metadata=ObjectMeta(name=name, namespace=NS, resource_version=str(rv)), value=value)
    return ObjectEvent(
        type=kind, kind="setting", namespace=NS, name=name, resource_version=str(rv), object=obj
    )


def deleted_at(rv: int, clock: Clock | None = None) -> Viewer:
    viewer = Viewer(clock or Clock())
    viewer.apply(event(EventType.ADDED, 5, "a"))
    viewer.apply(event(EventType.MODIFIED, 7, "b"))
    viewer.apply(event(EventType.DELETED, rv, "b"))
    assert viewer.held == {}
    return viewer


def test_a_late_event_after_the_delete_does_not_bring_the_object_back() -> None:
    viewer = deleted_at(8)
    viewer.apply(event(EventType.MODIFIED, 7, "b"))
    viewer.apply(event(EventType.ADDED, 5, "a"))
    assert viewer.held == {}, "resurrected by a copy of its past"
    assert viewer.version_at(("Setting", NS, "s")) is None


def test_an_object_created_again_is_held_and_a_late_delete_of_the_first_is_not_applied() -> None:
    viewer = deleted_at(8)
    viewer.apply(event(EventType.ADDED, 9, "new"))
    assert viewer.held == {"s": "new"}
    viewer.apply(event(EventType.DELETED, 8, "b"))  # the first one's delete, delivered again
    assert viewer.held == {"s": "new"}
    viewer.apply(event(EventType.MODIFIED, 7, "b"))
    assert viewer.held == {"s": "new"}


def test_other_objects_are_not_held_back_and_tombstones_are_bounded_in_time() -> None:
    clock = Clock()
    viewer = deleted_at(8, clock)
    viewer.apply(event(EventType.ADDED, 3, "other", name="t"))
    assert viewer.held == {"t": "other"}
    assert set(viewer.tombstones) == {("Setting", NS, "s")}
    clock.now += DeciderBase.TOMBSTONE_TTL
    viewer.apply(event(EventType.DELETED, 10, "other", name="t"))
    assert set(viewer.tombstones) == {("Setting", NS, "t")}, "the old one expired on the way"
