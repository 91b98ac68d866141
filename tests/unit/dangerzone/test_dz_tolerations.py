"""`taint-toleration` syntax and set identity (spec §3.4, §3.3 group A, §4.5, tests T3.1/T3.2)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.tolerations import (
    decode_last_applied,
    distinct_tolerations,
    last_applied_annotation,
    parse_tolerations,
    render_tolerations,
    same_toleration_set,
    toleration_set,
)
from corral_model.longhorn import Toleration


def tol(key: str = "", operator: str = "", value: str = "", effect: str = "") -> Toleration:
    return Toleration(key=key, operator=operator, value=value, effect=effect)


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        pytest.param("", (), id="3.4-empty"),
        pytest.param("   ", (), id="3.4-only-spaces"),
        pytest.param(
            "key1=value1:NoSchedule; key2:NoExecute",
            (tol("key1", "Equal", "value1", "NoSchedule"), tol("key2", "Exists", "", "NoExecute")),
            id="T3.1-accepted-value",
        ),
        pytest.param(
            "ex.com/foobar:NoExecute;ex.com/foobar:NoSchedule",
            (
                tol("ex.com/foobar", "Exists", "", "NoExecute"),
                tol("ex.com/foobar", "Exists", "", "NoSchedule"),
            ),
            id="T3.2-step1",
        ),
        pytest.param(
            "node-role.kubernetes.io/controlplane=true:NoSchedule",
            (tol("node-role.kubernetes.io/controlplane", "Equal", "true", "NoSchedule"),),
            id="T3.2-step2",
        ),
        pytest.param("key1=value1:", (tol("key1", "Equal", "value1", ""),), id="3.4-empty-effect"),
        pytest.param(":", (tol("", "Exists", "", ""),), id="3.4-bare-colon-tolerates-everything"),
        pytest.param("a=b=c:NoSchedule", (tol("", "", "", "NoSchedule"),), id="3.4-quirk-two-equals"),
        pytest.param(
            "k e y = v a l : PreferNoSchedule",
            (tol("key", "Equal", "val", "PreferNoSchedule"),),
            id="3.4-all-spaces-removed",
        ),
    ],
)
def test_parse(setting: str, expected: tuple[Toleration, ...]) -> None:
    assert parse_tolerations(setting) == expected


@pytest.mark.parametrize(
    ("setting", "reason"),
    [
        pytest.param(
            "key1=value1:NoSchedule; key2:InvalidEffect",
            "invalid effect: InvalidEffect",
            id="T3.1-invalid-effect",
        ),
        pytest.param("key1:NoSchedule;", "missing key/value and effect pair", id="3.4-trailing-semicolon"),
        pytest.param(
            "key2:NoExecute:", "missing key/value and effect pair", id="3.4-description-example-two-colons"
        ),
        pytest.param("key2", "missing key/value and effect pair", id="3.4-no-colon"),
        pytest.param("k:noschedule", "invalid effect: noschedule", id="3.4-effect-is-case-sensitive"),
    ],
)
def test_refused(setting: str, reason: str) -> None:
    with pytest.raises(SettingValueError) as err:
        parse_tolerations(setting)
    assert str(err.value) == f"failed to parse toleration: nil: {reason}"


def test_set_identity_ignores_order_and_duplicates() -> None:
    a = parse_tolerations("a:NoSchedule;b=1:NoExecute")
    b = parse_tolerations("b=1:NoExecute;a:NoSchedule;a:NoSchedule")
    assert same_toleration_set(a, b)
    assert not same_toleration_set(a, parse_tolerations("a:NoSchedule"))


def test_set_identity_counts_toleration_seconds() -> None:
    # Longhorn deep-compares the identity maps, so the same key/operator/value/effect with seconds differs.
    with_seconds = Toleration(key="a", operator="Exists", effect="NoExecute", toleration_seconds=30)
    assert not same_toleration_set([with_seconds], parse_tolerations("a:NoExecute"))


def test_identity_concatenation_collides_like_longhorn() -> None:
    assert set(toleration_set([tol("aExists")])) == set(toleration_set([tol("a", "Exists")]))


def test_distinct_keeps_one_per_identity() -> None:
    parsed = parse_tolerations("a:NoSchedule;b:NoSchedule;a:NoSchedule")
    assert distinct_tolerations(parsed) == (
        tol("a", "Exists", "", "NoSchedule"),
        tol("b", "Exists", "", "NoSchedule"),
    )


def test_last_applied_annotation_is_json_of_the_parsed_list() -> None:
    parsed = parse_tolerations("key1=value1:NoSchedule;key2:NoExecute")
    assert last_applied_annotation(parsed) == (
        '[{"key":"key1","operator":"Equal","value":"value1","effect":"NoSchedule"},'
        '{"key":"key2","operator":"Exists","effect":"NoExecute"}]'
    )
    assert last_applied_annotation(()) == "[]"
    assert decode_last_applied(last_applied_annotation(parsed)) == parsed


@pytest.mark.parametrize("annotation", [None, "", "[]", "null"])
def test_missing_last_applied_means_empty(annotation: str | None) -> None:
    assert decode_last_applied(annotation) == ()


def test_malformed_last_applied_is_an_error() -> None:
    with pytest.raises(SettingValueError):
        decode_last_applied("[{")


_word = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters="./-_"), max_size=12)
_effect = st.sampled_from(["", "NoExecute", "NoSchedule", "PreferNoSchedule"])
_toleration = st.one_of(
    st.builds(lambda k, e: tol(k, "Exists", "", e), _word, _effect),
    st.builds(lambda k, v, e: tol(k, "Equal", v, e), _word, _word, _effect),
)


@given(st.lists(_toleration, min_size=1, max_size=6))
def test_round_trip(tolerations: list[Toleration]) -> None:
    assert parse_tolerations(render_tolerations(tolerations)) == tuple(tolerations)


@given(st.lists(_toleration, max_size=6))
def test_annotation_round_trip(tolerations: list[Toleration]) -> None:
    assert decode_last_applied(last_applied_annotation(tolerations)) == tuple(tolerations)
