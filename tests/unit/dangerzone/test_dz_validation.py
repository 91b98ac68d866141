"""The setting webhooks without the cluster (spec §3.2): normalisation, then `ValidateSetting`'s
generic part with Longhorn's nested messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.cpumask import mask_value
from corral_dangerzone.errors import SettingNotSupportedError, SettingValueError
from corral_dangerzone.table import DANGER_ZONE, definition
from corral_dangerzone.validation import normalize_value, validate_value
from corral_dangerzone.values import engine_value, parse_engine_values


def admit(name: str, value: str) -> str:
    """Mutating webhook, then validating webhook on what it wrote."""
    stored = normalize_value(name, value)
    validate_value(name, stored)
    return stored


@pytest.mark.parametrize(
    ("name", "value", "stored"),
    [
        pytest.param(
            "guaranteed-instance-manager-cpu", "20", '{"v1":"20","v2":"20"}', id="3.1-scalar-expanded"
        ),
        pytest.param(
            "guaranteed-instance-manager-cpu", "20.0", '{"v1":"20","v2":"20"}', id="3.2-float-shortest"
        ),
        pytest.param(
            "guaranteed-instance-manager-cpu", "12.50", '{"v1":"12.5","v2":"12.5"}', id="float-trailing-zero"
        ),
        pytest.param(
            "guaranteed-instance-manager-cpu",
            '{"v1":"10","v2":"12"}',
            '{"v1":"10","v2":"12"}',
            id="T3.4-json",
        ),
        pytest.param(
            "guaranteed-instance-manager-cpu",
            ' {"v2":"1e1", "v1":"0"} ',
            '{"v1":"0","v2":"10"}',
            id="json-sorted",
        ),
        pytest.param("data-engine-hugepage-enabled", "True", '{"v2":"true"}', id="3.2-bool-rerendered"),
        pytest.param(
            "data-engine-hugepage-enabled",
            '{"v1":"true","v2":"false"}',
            '{"v2":"false"}',
            id="3.2-engine-not-in-default-dropped",
        ),
        pytest.param("data-engine-memory-size", "+007", '{"v2":"7"}', id="int-rerendered"),
        pytest.param("data-engine-cpu-mask", "1-3,5", '{"v2":"0x2e"}', id="3.2-cpu-list-to-hex"),
        pytest.param("data-engine-cpu-mask", '{"v2":"0X3F"}', '{"v2":"0X3F"}', id="3.2-hex-keeps-case"),
        pytest.param(
            "taint-toleration", " a:NoSchedule ", " a:NoSchedule ", id="plain-setting-stored-as-given"
        ),
        pytest.param("engine-image-pod-liveness-probe-period", "15", "15", id="T3.7-probe-period"),
        pytest.param("priority-class", "anything at all", "anything at all", id="3.2-untyped-not-checked"),
        pytest.param("storage-network", "kube-system/demo", "kube-system/demo", id="T3.9"),
    ],
)
def test_admitted(name: str, value: str, stored: str) -> None:
    assert admit(name, value) == stored


def _refusal(name: str, value: str) -> str:
    with pytest.raises(SettingValueError) as err:
        admit(name, value)
    return str(err.value)


def test_t3_4_forty_one_percent() -> None:
    stored = '{"v1":"41","v2":"41"}'
    assert _refusal("guaranteed-instance-manager-cpu", "41") == (
        f"value {stored} of settings guaranteed-instance-manager-cpu is invalid: "
        "value 41 for data engine v1 should be less than or equal to 40\n"
        "value 41 for data engine v2 should be less than or equal to 40"
    )


@pytest.mark.parametrize(
    ("value", "detail"),
    [
        pytest.param(
            "-1",
            "value -1 for data engine all should be larger than or equal to 1",
            id="T3.7-period-minus-one",
        ),
        pytest.param("61", "value 61 for data engine all should be less than or equal to 60", id="above-max"),
        pytest.param(
            "abc",
            "failed to parse value abc for setting Engine Image Pod Liveness Probe Period: "
            'failed to parse single int value abc: strconv.ParseInt: parsing "abc": invalid syntax',
            id="T3.7-threshold-abc",
        ),
        pytest.param(
            "",
            "required setting engine-image-pod-liveness-probe-period shouldn't be empty",
            id="3.2-required",
        ),
    ],
)
def test_probe_period_refusals(value: str, detail: str) -> None:
    name = "engine-image-pod-liveness-probe-period"
    assert _refusal(name, value) == f"value {value} of settings {name} is invalid: {detail}"


def test_t3_7_probe_timeout_zero() -> None:
    assert _refusal("engine-image-pod-liveness-probe-timeout", "0").endswith(
        "value 0 for data engine all should be larger than or equal to 1"
    )


@pytest.mark.parametrize(
    ("name", "value", "detail"),
    [
        pytest.param(
            "guaranteed-instance-manager-cpu",
            '{"v1":"12"}',
            "mismatched data engines for setting Guaranteed Instance Manager CPU",
            id="3.2-mismatched-engines",
        ),
        pytest.param(
            "guaranteed-instance-manager-cpu",
            '{"v1":"12","v3":"12"}',
            "mismatched data engines for setting Guaranteed Instance Manager CPU",
            id="3.2-unknown-engine-dropped-by-mutation-then-mismatched",
        ),
        pytest.param(
            "taint-toleration",
            "key1=value1:NoSchedule; key2:InvalidEffect",
            "the value of taint-toleration is invalid: "
            "failed to parse toleration: nil: invalid effect: InvalidEffect",
            id="T3.1-invalid-effect",
        ),
        pytest.param(
            "system-managed-components-node-selector",
            "a=b",
            "the value of system-managed-components-node-selector is invalid: "
            "Error while unmarshal node selector: invalid label a=b: should contain the separator ':'",
            id="3.4-selector-description-form",
        ),
        pytest.param(
            "endpoint-network-for-rwx-volume",
            "a/b/c",
            "the value of endpoint-network-for-rwx-volume is invalid: "
            "cni network must be in <NAMESPACE>/<NETWORK-ATTACHMENT-DEFINITION> format: a/b/c",
            id="3.4-network",
        ),
        pytest.param(
            "v1-data-engine",
            "yes",
            "failed to parse value yes for setting V1 Data Engine: failed to parse single bool value yes: "
            'strconv.ParseBool: parsing "yes": invalid syntax',
            id="bool-syntax",
        ),
        pytest.param(
            "data-engine-iobuf-small-pool-size",
            "4096",
            "value 4096 for data engine v2 should be larger than or equal to 8192",
            id="iobuf-min",
        ),
        pytest.param(
            "guaranteed-instance-manager-cpu",
            "NaN",
            "value NaN for data engine v1 is not a number\nvalue NaN for data engine v2 is not a number",
            id="nan-refused-deliberately",
        ),
    ],
)
def test_refusal_details(name: str, value: str, detail: str) -> None:
    message = _refusal(name, value)
    assert message.endswith(detail)
    assert message.startswith("value ")


def test_3_2_an_engine_outside_the_default_when_validated_directly() -> None:
    with pytest.raises(SettingValueError) as err:
        validate_value("guaranteed-instance-manager-cpu", '{"v1":"12","v3":"12"}')
    assert str(err.value).endswith(
        "data engine v3 is not supported for setting Guaranteed Instance Manager CPU"
    )
    with pytest.raises(SettingValueError) as err:
        validate_value("data-engine-memory-size", '{"v1":"12"}')
    assert str(err.value).endswith("data engine v1 is not supported for setting Data Engine Memory Size")


def test_t3_1_message_contains_invalid_effect() -> None:
    assert "invalid effect" in _refusal("taint-toleration", "key1=value1:NoSchedule; key2:InvalidEffect")


def test_json_null_is_stored_as_an_empty_object_then_refused() -> None:
    stored = normalize_value("guaranteed-instance-manager-cpu", "null")
    assert stored == "{}"
    with pytest.raises(SettingValueError) as err:
        validate_value("guaranteed-instance-manager-cpu", stored)
    assert str(err.value).endswith(
        "failed to parse value {} for setting Guaranteed Instance Manager CPU, value cannot be empty"
    )


def test_json_numbers_are_not_strings() -> None:
    with pytest.raises(SettingValueError) as err:
        normalize_value("guaranteed-instance-manager-cpu", '{"v1": 12, "v2": 12}')
    assert str(err.value) == (
        "failed to get valid value for setting guaranteed-instance-manager-cpu: "
        'failed to parse JSON-formatted value {"v1": 12, "v2": 12}: '
        "json: cannot unmarshal number into Go value of type string"
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        pytest.param(
            "data-engine-memory-size",
            "",
            "failed to get valid value for setting data-engine-memory-size: "
            'failed to parse single int value : strconv.ParseInt: parsing "": invalid syntax',
            id="des-empty-scalar",
        ),
        pytest.param(
            "data-engine-memory-size",
            '{"v2":"x"}',
            "failed to get valid value for setting data-engine-memory-size: failed to parse int value x for "
            'data engine v2: strconv.ParseInt: parsing "x": invalid syntax',
            id="des-json-bad-entry",
        ),
        pytest.param(
            "data-engine-cpu-mask",
            "3-1",
            "failed to normalize value for setting data-engine-cpu-mask: "
            'failed to normalize CPU mask for data engine v2: invalid CPU range "3-1": start (3) > end (1)',
            id="cpu-mask-normalisation",
        ),
    ],
)
def test_mutating_webhook_refusals(name: str, value: str, message: str) -> None:
    with pytest.raises(SettingValueError) as err:
        normalize_value(name, value)
    assert str(err.value) == message


def test_unknown_settings() -> None:
    with pytest.raises(SettingNotSupportedError, match=r"^setting nope does not exist$"):
        normalize_value("nope", "1")
    with pytest.raises(
        SettingNotSupportedError,
        match=r"^value 1 of settings nope is invalid: setting nope is not supported$",
    ):
        validate_value("nope", "1")


@pytest.mark.parametrize("name", [n.value for n in DANGER_ZONE])
def test_every_default_is_admitted_unchanged(name: str) -> None:
    default = definition(name).default
    assert admit(name, default) == default


def test_engine_value_reads_scalar_and_json() -> None:
    assert engine_value("guaranteed-instance-manager-cpu", '{"v1":"10","v2":"12"}', "v2") == 12.0
    assert engine_value("guaranteed-instance-manager-cpu", "15", "v1") == 15.0
    assert engine_value("v2-data-engine", "true", "v2") is True
    with pytest.raises(SettingValueError, match="not defined"):
        engine_value("data-engine-memory-size", '{"v2":"1"}', "v1")


@given(st.floats(min_value=0, max_value=40, allow_nan=False))
def test_admitted_floats_read_back_equal(percent: float) -> None:
    stored = admit("guaranteed-instance-manager-cpu", repr(percent))
    values = parse_engine_values(definition("guaranteed-instance-manager-cpu"), stored)
    assert values == {"v1": percent, "v2": percent}


_des_inputs = st.one_of(
    st.tuples(st.just("guaranteed-instance-manager-cpu"), st.floats(0, 40, allow_nan=False).map(repr)),
    st.tuples(st.just("data-engine-memory-size"), st.integers(0, 10**6).map(str)),
    st.tuples(st.just("data-engine-hugepage-enabled"), st.sampled_from(["1", "t", "TRUE", "false", "F"])),
    st.tuples(
        st.just("data-engine-cpu-mask"),
        st.sets(st.integers(0, 63), min_size=1, max_size=8).map(
            lambda cpus: ",".join(map(str, sorted(cpus)))
        ),
    ),
    st.tuples(
        st.just("guaranteed-instance-manager-cpu"),
        st.tuples(st.integers(0, 40), st.integers(0, 40)).map(lambda p: f'{{"v2":"{p[1]}","v1":"{p[0]}"}}'),
    ),
)


@given(_des_inputs)
def test_normalisation_is_idempotent_and_keeps_the_meaning(case: tuple[str, str]) -> None:
    name, value = case
    stored = admit(name, value)
    assert normalize_value(name, stored) == stored
    before = parse_engine_values(definition(name), value)
    after = parse_engine_values(definition(name), stored)
    if name == "data-engine-cpu-mask":
        assert {e: mask_value(str(v)) for e, v in after.items()} == {
            e: mask_value(str(v)) for e, v in before.items()
        }
    else:
        assert after == before
