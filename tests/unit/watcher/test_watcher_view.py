"""The difference a re-list makes to what the watcher last published (corral_watcher.view)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from corral_model.envelopes import EventType
from corral_model.longhorn import ObjectMeta, Volume
from corral_watcher.view import PublishedView


def vol(name: str, rv: int, uid: str = "") -> Volume:
    return Volume(metadata=ObjectMeta(name=name, uid=uid or f"uid-{name}", resource_version=str(rv)))


def test_relist_yields_added_modified_and_deleted_for_what_vanished() -> None:
    view = PublishedView()
    assert [(c.type, c.object) for c in view.resync([vol("a", 1), vol("b", 2), vol("c", 3)])] == [
        (EventType.ADDED, vol("a", 1)),
        (EventType.ADDED, vol("b", 2)),
        (EventType.ADDED, vol("c", 3)),
    ]
    changes = view.resync([vol("a", 1), vol("b", 7), vol("d", 8)])
    assert [(c.type, c.object.metadata.name) for c in changes] == [
        (EventType.MODIFIED, "b"),
        (EventType.ADDED, "d"),
        (EventType.DELETED, "c"),
    ]
    # The tombstone carries the last state that was published.
    assert changes[-1].object == vol("c", 3)
    assert view.resync([vol("a", 1), vol("b", 7), vol("d", 8)]) == []


def test_recreated_object_is_only_added_again() -> None:
    view = PublishedView()
    view.resync([vol("a", 1)])
    changes = view.resync([vol("a", 5, uid="uid-new")])
    assert [(c.type, c.object.metadata.uid) for c in changes] == [(EventType.ADDED, "uid-new")]


def test_watch_events_update_the_view() -> None:
    view = PublishedView()
    view.apply("ADDED", vol("a", 1))
    view.apply("MODIFIED", vol("a", 2))
    view.apply("ADDED", vol("b", 3))
    view.apply("DELETED", vol("b", 4))
    assert view.objects == {"a": vol("a", 2)}
    assert [c.type for c in view.resync([vol("a", 2)])] == []


states = st.dictionaries(st.sampled_from("abcdefgh"), st.integers(1, 5), max_size=8)


@given(states, states)
def test_replaying_the_changes_onto_the_old_state_gives_the_new_state(
    old: dict[str, int], new: dict[str, int]
) -> None:
    view = PublishedView()
    view.resync([vol(n, rv) for n, rv in sorted(old.items())])
    consumer = {n: vol(n, rv) for n, rv in old.items()}
    for change in view.resync([vol(n, rv) for n, rv in sorted(new.items())]):
        name = change.object.metadata.name
        if change.type is EventType.DELETED:
            del consumer[name]
        else:
            consumer[name] = change.object
    assert consumer == {n: vol(n, rv) for n, rv in new.items()}


def test_an_unreadable_object_is_not_tombstoned() -> None:
    view = PublishedView()
    view.resync([vol("a", 1), vol("b", 2)])
    assert view.resync([vol("a", 1)], unreadable={"b"}) == []
    assert view.objects == {"a": vol("a", 1), "b": vol("b", 2)}
    assert [c.type for c in view.resync([vol("a", 1)])] == [EventType.DELETED]


def test_an_unreadable_object_keeps_its_last_state_or_a_placeholder_until_it_vanishes() -> None:
    view = PublishedView()
    view.resync([vol("a", 1)])
    # "a" no longer decodes; "b" never did: neither is deleted, "b" is held by its placeholder.
    changes = view.resync([], {"a", "b"}, {"a": vol("a", 4), "b": vol("b", 5)})
    assert changes == []
    assert view.objects == {"a": vol("a", 1), "b": vol("b", 5)}
    # Both gone: tombstones, with the last state published (the placeholder for "b").
    changes = view.resync([])
    assert [(c.type, c.object) for c in changes] == [
        (EventType.DELETED, vol("a", 1)),
        (EventType.DELETED, vol("b", 5)),
    ]
