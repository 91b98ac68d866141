"""`data-engine-cpu-mask`: hex masks and CPU lists (spec §3.2 normalisation, §3.4 syntax)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.cpumask import (
    MAX_CPU,
    cpu_list_to_mask,
    cpus_of_mask,
    hex_mask,
    mask_value,
    normalize_cpu_mask,
    render_cpu_list,
)
from corral_dangerzone.errors import SettingValueError


@pytest.mark.parametrize(
    ("value", "normalised"),
    [
        pytest.param("1-3,5", "0x2e", id="3.2-list-example"),
        pytest.param("0", "0x1", id="3.4-single"),
        pytest.param("0-3", "0xf", id="3.4-range"),
        pytest.param("1,2,3", "0xe", id="3.4-items"),
        pytest.param("1-3,5,7", "0xae", id="3.4-mixed"),
        pytest.param("(1-3),(5)", "0x2e", id="3.4-parenthesised"),
        pytest.param(" 0 - 1 , 2 ", "0x7", id="spaces-inside"),
        pytest.param("1023", "0x8" + "0" * 255, id="highest-cpu"),
        pytest.param("0x3", "0x3", id="hex-kept"),
        pytest.param("0X3F", "0X3F", id="3.2-hex-keeps-its-case"),
        pytest.param("0x003", "0x003", id="hex-keeps-leading-zeros"),
        pytest.param("  0xff ", "0xff", id="hex-trimmed"),
    ],
)
def test_normalise(value: str, normalised: str) -> None:
    assert normalize_cpu_mask(value) == normalised


@pytest.mark.parametrize(
    ("value", "message"),
    [
        pytest.param("", "CPU mask value is empty", id="3.4-empty"),
        pytest.param("()", "CPU list is empty", id="empty-after-parentheses"),
        pytest.param("1,,2", 'invalid CPU list "1,,2": empty CPU entry', id="3.4-empty-item"),
        pytest.param("3-1", 'invalid CPU range "3-1": start (3) > end (1)', id="3.4-reversed-range"),
        pytest.param("1024", "CPU number 1024 is out of valid range (0-1023)", id="3.4-cpu-too-high"),
        pytest.param("0-1024", "CPU number 1024 is out of valid range (0-1023)", id="range-too-high"),
        pytest.param("a", 'invalid CPU number "a"', id="not-a-number"),
        pytest.param("-1", 'invalid CPU number "" in range "-1"', id="negative-is-a-range"),
        pytest.param(
            "0x", 'invalid hex CPU mask "0x": missing hex digits after prefix', id="3.4-hex-no-digits"
        ),
        pytest.param(
            "0xg", 'invalid hex CPU mask "0xg": contains non-hex character "g"', id="3.4-invalid-hex"
        ),
        pytest.param("0x0", 'CPU mask "0x0" is zero, at least one CPU must be selected', id="3.4-zero-mask"),
        pytest.param("0x1" + "0" * 256, "exceeds maximum supported CPU 1023", id="3.4-mask-too-long"),
    ],
)
def test_refused(value: str, message: str) -> None:
    with pytest.raises(SettingValueError) as err:
        normalize_cpu_mask(value)
    assert message in str(err.value)


@given(st.sets(st.integers(0, MAX_CPU), min_size=1, max_size=40))
def test_cpu_list_round_trip(cpus: set[int]) -> None:
    rendered = render_cpu_list(cpus)
    assert set(cpus_of_mask(cpu_list_to_mask(rendered))) == cpus
    assert normalize_cpu_mask(rendered) == hex_mask(sum(1 << c for c in cpus))


@given(st.integers(1, 2 ** (MAX_CPU + 1) - 1))
def test_hex_mask_round_trip(mask: int) -> None:
    assert normalize_cpu_mask(hex_mask(mask)) == hex_mask(mask)
    assert mask_value(hex_mask(mask)) == mask
    assert mask_value(render_cpu_list(cpus_of_mask(mask))) == mask
