"""`system-managed-components-node-selector` syntax (spec §3.4) and equality (§3.3, §4.5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.node_selector import parse_node_selector, render_node_selector, same_node_selector


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        pytest.param("", {}, id="empty"),
        pytest.param("  ", {}, id="spaces"),
        pytest.param(
            "kubernetes.io/hostname:node-1", {"kubernetes.io/hostname": "node-1"}, id="3.4-tests-form"
        ),
        pytest.param(" a : 1 ; b:2 ", {"a": "1", "b": "2"}, id="3.4-trimmed"),
        pytest.param("a:1;a:2", {"a": "2"}, id="later-key-wins"),
        pytest.param("a:", {"a": ""}, id="empty-value"),
    ],
)
def test_parse(setting: str, expected: dict[str, str]) -> None:
    assert parse_node_selector(setting) == expected


@pytest.mark.parametrize(
    ("setting", "label"),
    [
        pytest.param(
            "label-key1=label-value1", "label-key1=label-value1", id="3.4-description-form-is-rejected"
        ),
        pytest.param("a:1;", "", id="trailing-semicolon"),
        pytest.param("a:b:c", "a:b:c", id="two-colons"),
    ],
)
def test_refused(setting: str, label: str) -> None:
    with pytest.raises(SettingValueError) as err:
        parse_node_selector(setting)
    assert str(err.value) == (
        f"Error while unmarshal node selector: invalid label {label}: should contain the separator ':'"
    )


@pytest.mark.parametrize(
    ("pod", "expected", "same"),
    [
        pytest.param(None, {}, True, id="4.5-nil-pod-selector-empty-setting"),
        pytest.param({}, {}, True, id="empty-map"),
        pytest.param(None, {"a": "1"}, False, id="nil-vs-set"),
        pytest.param({"a": "1"}, {}, False, id="set-vs-empty"),
        pytest.param({"a": "1", "b": "2"}, {"b": "2", "a": "1"}, True, id="order-free"),
    ],
)
def test_equality(pod: dict[str, str] | None, expected: dict[str, str], same: bool) -> None:
    assert same_node_selector(pod, expected) is same


_part = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="./-_"), max_size=10)


@given(st.dictionaries(_part, _part, max_size=5))
def test_round_trip(selector: dict[str, str]) -> None:
    assert parse_node_selector(render_node_selector(selector)) == (
        selector if selector != {"": ""} else {"": ""}
    )
