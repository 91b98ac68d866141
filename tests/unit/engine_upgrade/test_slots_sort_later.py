"""`Owners(sort_later=True)` files the very members `Owners()` does: a bootstrap appends volumes
unsorted and sorts once (slots.py), which must never change an owner's order, and so never which
volume a walk takes first. Volumes arrive in any order, move between owners, change rank and die
while filing is deferred; then both are compared, and go on filing in place side by side."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from corral_engine_upgrade.records import VolumeRecord
from corral_engine_upgrade.slots import Owners

OWNERS = ["node-a", "node-b", "node-c"]

# One change of a volume: (index, owner, attached, alive).
Change = tuple[int, str, bool, bool]
changes = st.lists(
    st.tuples(st.integers(0, 30), st.sampled_from(OWNERS), st.booleans(), st.booleans()), max_size=120
)


def _apply(owners: Owners, records: dict[int, VolumeRecord], change: Change) -> None:
    index, owner, attached, alive = change
    volume = records.get(index)
    if volume is None:
        volume = records[index] = VolumeRecord(namespace=f"ns-{index % 3}", name=f"pvc-{index:03d}")
    volume.owner = owner
    volume.state = "attached" if attached else "detached"
    volume.alive = alive
    owners.track(volume)


def _walker(seen: list[str]) -> Callable[[VolumeRecord, bool], bool]:
    """A classify that notes each volume it is asked about and takes none: the walk goes on."""

    def classify(volume: VolumeRecord, take_now: bool) -> bool:
        seen.append(volume.name)
        return False

    return classify


def _members(owners: Owners) -> dict[str, list[tuple[str, str]]]:
    return {
        name: [(v.namespace, v.name) for v in node.sorted_members()] for name, node in owners.nodes.items()
    }


@settings(max_examples=300, deadline=None)
@given(before=changes, after=changes)
def test_sorting_later_files_the_same_members(before: list[Change], after: list[Change]) -> None:
    in_place, later = Owners(), Owners(sort_later=True)
    in_place_records: dict[int, VolumeRecord] = {}
    later_records: dict[int, VolumeRecord] = {}
    for change in before:
        _apply(in_place, in_place_records, change)
        _apply(later, later_records, change)
    later.sort_members()
    assert _members(later) == _members(in_place)
    for change in after:  # filed in place from now on, by both
        _apply(in_place, in_place_records, change)
        _apply(later, later_records, change)
    assert _members(later) == _members(in_place)


@settings(max_examples=100, deadline=None)
@given(before=changes)
def test_a_walk_before_sort_members_sees_the_filing_order(before: list[Change]) -> None:
    """`take` ends the deferral itself: a walk never runs over unsorted members."""
    in_place, later = Owners(), Owners(sort_later=True)
    in_place_records: dict[int, VolumeRecord] = {}
    later_records: dict[int, VolumeRecord] = {}
    for change in before:
        _apply(in_place, in_place_records, change)
        _apply(later, later_records, change)
    for name in OWNERS:
        seen_in_place: list[str] = []
        seen_later: list[str] = []
        in_place.take(name, 2, _walker(seen_in_place))
        later.take(name, 2, _walker(seen_later))
        assert seen_later == seen_in_place
    assert _members(later) == _members(in_place)
