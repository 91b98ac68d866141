"""A replica is known by a number when Longhorn named it (`<volume>-r-<8 hex>`), else by a negative
number of its name's own: two different names of one volume's replicas never share a key, and the
name comes back."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_engine_upgrade.records import RV, STRIDE, replica_key, replica_name, replica_nodes
from corral_engine_upgrade.view import ClusterView
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent

VOLUME = "pvc-0a1b2c3d"


def test_a_longhorn_name_is_kept_as_the_number_its_digits_spell() -> None:
    assert replica_key(VOLUME, f"{VOLUME}-r-00c0ffee") == 0xC0FFEE


@pytest.mark.parametrize(
    "name",
    [
        f"{VOLUME}-r-00C0FFEE",  # upper case would collide with the lower-case name
        f"{VOLUME}-r-00_0ffee",  # int() accepts underscores
        f"{VOLUME}-r-00c0ff\u0663e",  # and non-ASCII digits
        f"{VOLUME}-r-+0c0ffee",  # and signs
        f"{VOLUME}-r-0c0ffee",  # seven digits
        f"{VOLUME}-x-00c0ffee",
        "pvc-other-r-00c0ffee",
        "my-replica",
    ],
)
def test_any_other_name_has_a_negative_key_of_its_own(name: str) -> None:
    key = replica_key(VOLUME, name)
    assert key < 0
    assert replica_key(VOLUME, name) == key
    assert replica_name(VOLUME, key) == name


@given(st.text(alphabet="0123456789abcdefABCDEF_+-rx", min_size=0, max_size=14))
def test_keys_are_one_to_one_and_give_the_name_back(suffix: str) -> None:
    name = VOLUME + suffix
    key = replica_key(VOLUME, name)
    assert replica_name(VOLUME, key) == name


def _replica_event(rv: str, node: str = "n1") -> ObjectEvent[Any]:
    replica = lh.Replica(
        metadata=lh.ObjectMeta(name=f"{VOLUME}-r-0000abcd", namespace="ns"),
        spec=lh.ReplicaSpec(volume_name=VOLUME, node_id=node),
    )
    return ObjectEvent(
        type=EventType.MODIFIED,
        kind="replica",
        namespace="ns",
        name=replica.metadata.name,
        resource_version=rv,
        object=replica,
    )


def test_a_resource_version_past_64_bits_is_kept_as_unknown() -> None:
    """A replica's rv lives in an array of 64-bit integers: one no API server issues is not refused,
    it is held as unknown (-1), which ordering accepts, so the next event still counts."""
    view = ClusterView()
    view.apply(_replica_event("5"), 0.0)
    view.apply(_replica_event(str(2**70), node="n2"), 0.0)
    view.apply(_replica_event("7", node="n3"), 0.0)
    view.apply(_replica_event("6", node="n4"), 0.0)  # older than 7: ignored
    items = view._orphan_replicas[("ns", VOLUME)]
    assert list(items[RV::STRIDE]) == [7]
    assert replica_nodes(items) == ["n3"]
