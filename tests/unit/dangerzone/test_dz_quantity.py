"""Quantity comparison as Longhorn does it (spec §4.4: `0.25` equals `250m`, a missing request is 0)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.quantity import milli_value, parse_quantity, same_quantity


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        pytest.param("0.25", "250m", True, id="4.4-example"),
        pytest.param(None, "0", True, id="4.4-missing-is-zero"),
        pytest.param(None, "0m", True, id="missing-is-zero-millis"),
        pytest.param("2Gi", "2048Mi", True, id="binary"),
        pytest.param("1", "1000m", True, id="cores"),
        pytest.param("1e3", "1k", True, id="exponent"),
        pytest.param("480m", "0.48", True, id="fraction"),
        pytest.param("150m", "151m", False, id="different"),
        pytest.param("1Mi", "1M", False, id="binary-is-not-decimal"),
    ],
)
def test_same_quantity(a: str | None, b: str, same: bool) -> None:
    assert same_quantity(a, b) is same


@pytest.mark.parametrize(("text", "millis"), [("4", 4000), ("3500m", 3500), ("0.0001", 1), ("1.5", 1500)])
def test_milli_value_rounds_up(text: str, millis: int) -> None:
    assert milli_value(text) == millis


def test_exact_values() -> None:
    assert parse_quantity("1.5Gi") == Fraction(3 * 2**29)
    assert parse_quantity("-1m") == Fraction(-1, 1000)


@pytest.mark.parametrize("text", ["", "abc", "1.5.5", "1Kb", "m"])
def test_refused(text: str) -> None:
    with pytest.raises(SettingValueError, match="quantities must match the regular expression"):
        parse_quantity(text)
