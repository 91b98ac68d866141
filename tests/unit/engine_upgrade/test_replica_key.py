"""A replica is known by a number when Longhorn named it (`<volume>-r-<8 hex>`), else by a negative
number of its name's own: two different names of one volume's replicas never share a key, and the
name comes back."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_engine_upgrade.records import replica_key, replica_name

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
