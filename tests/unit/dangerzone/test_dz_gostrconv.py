"""Go strconv syntax: what Longhorn accepts for typed settings differs from Python's int/float/bool."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.gostrconv import format_float_f, format_float_v, parse_bool, parse_float, parse_int


@pytest.mark.parametrize(
    ("text", "value"),
    [(t, True) for t in ("1", "t", "T", "TRUE", "true", "True")]
    + [(t, False) for t in ("0", "f", "F", "FALSE", "false", "False")],
)
def test_go_bools(text: str, value: bool) -> None:
    assert parse_bool(text) is value


@pytest.mark.parametrize("text", ["yes", "tRUE", " true", "", "2", "on"])
def test_not_go_bools(text: str) -> None:
    with pytest.raises(SettingValueError, match=r"^strconv.ParseBool: parsing .*: invalid syntax$"):
        parse_bool(text)


@pytest.mark.parametrize(
    ("text", "value"), [("5", 5), ("+5", 5), ("-1", -1), ("007", 7), ("9223372036854775807", 2**63 - 1)]
)
def test_go_ints(text: str, value: int) -> None:
    assert parse_int(text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("abc", "invalid syntax"),
        ("1_000", "invalid syntax"),
        (" 5", "invalid syntax"),
        ("٣", "invalid syntax"),
        ("1.0", "invalid syntax"),
        ("", "invalid syntax"),
        ("9223372036854775808", "value out of range"),
    ],
)
def test_not_go_ints(text: str, reason: str) -> None:
    with pytest.raises(SettingValueError) as err:
        parse_int(text)
    assert str(err.value).endswith(reason)
    assert str(err.value).startswith("strconv.ParseInt: parsing ")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12", 12.0),
        ("12.5", 12.5),
        (".5", 0.5),
        ("5.", 5.0),
        ("1e1", 10.0),
        ("-0", -0.0),
        ("0x1p-2", 0.25),
        ("+Inf", math.inf),
        ("infinity", math.inf),
    ],
)
def test_go_floats(text: str, value: float) -> None:
    assert parse_float(text) == value


@pytest.mark.parametrize("text", ["1_0", " 1", "1e", "", "0x1", "abc", "+nan"])
def test_not_go_floats(text: str) -> None:
    with pytest.raises(SettingValueError, match=r"invalid syntax$"):
        parse_float(text)


def test_float_overflow_is_out_of_range() -> None:
    with pytest.raises(SettingValueError, match=r"value out of range$"):
        parse_float("1e400")


@pytest.mark.parametrize(
    ("value", "f", "v"),
    [
        (20.0, "20", "20"),
        (12.5, "12.5", "12.5"),
        (1e6, "1000000", "1e+06"),
        (1e-5, "0.00001", "1e-05"),
        (123456.0, "123456", "123456"),
    ],
)
def test_float_rendering(value: float, f: str, v: str) -> None:
    assert format_float_f(value) == f
    assert format_float_v(value) == v


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_f_rendering_round_trips(value: float) -> None:
    assert parse_float(format_float_f(value)) == value
    assert "e" not in format_float_f(value)
