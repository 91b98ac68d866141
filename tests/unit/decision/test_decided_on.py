"""The `Corral-Decided-On` header reads back what was written, and a value this release cannot
read (a bad byte, a newer format) is no mark at all, never a wrong one."""

from __future__ import annotations

import pytest

from corral_decision.decided_on import DecidedOn


def test_a_mark_reads_back() -> None:
    mark = DecidedOn(174, 12, 1764431200.123456)
    assert DecidedOn.parse(mark.header()) == mark


@pytest.mark.parametrize(
    "value", ["", "174 12", "174 12 x", "174 -1 1.0", "174 12 nan", "174 12 inf", "a 12 1.0", "1 2 3 4"]
)
def test_an_unreadable_mark_is_none(value: str) -> None:
    assert DecidedOn.parse(value) is None
