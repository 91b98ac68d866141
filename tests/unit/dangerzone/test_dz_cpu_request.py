"""The IM CPU request formula with the per-node override (spec §4.4, T3.4, DZ-10)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.cpu_request import instance_manager_cpu_request, same_cpu_request
from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.quantity import parse_quantity
from corral_dangerzone.settings import DangerZoneSettings
from tests.unit.dangerzone.builders import kube_node, longhorn_node


def request(engine: str, values: dict[str, str], *, node_request: int = 0, cpu: str = "4") -> str | None:
    settings = DangerZoneSettings.from_values(values)
    return instance_manager_cpu_request(
        engine, settings, longhorn_node(cpu_request=node_request), kube_node(cpu=cpu)
    )


@pytest.mark.parametrize(
    ("engine", "values", "node_request", "cpu", "expected"),
    [
        pytest.param("v1", {}, 150, "4", "150m", id="T3.4-step1-node-override-150"),
        pytest.param(
            "v1", {"guaranteed-instance-manager-cpu": "10"}, 0, "4", "400m", id="T3.4-step2-10-percent"
        ),
        pytest.param(
            "v1", {"guaranteed-instance-manager-cpu": "0"}, 0, "4", None, id="T3.4-step3-0-no-request"
        ),
        pytest.param(
            "v1", {"guaranteed-instance-manager-cpu": "0"}, 150, "4", "150m", id="DZ-10-override-beats-0"
        ),
        pytest.param(
            "v1", {"guaranteed-instance-manager-cpu": "20"}, 0, "3500m", "700m", id="T3.4-step5-20-percent"
        ),
        pytest.param("v1", {}, 0, "4", "480m", id="default-12-percent"),
        pytest.param(
            "v1", {"guaranteed-instance-manager-cpu": "12.5"}, 0, "3", "375m", id="fractional-percent"
        ),
        pytest.param(
            "v1", {"guaranteed-instance-manager-cpu": "12.5"}, 0, "1004m", "126m", id="round-half-away"
        ),
        pytest.param(
            "v1",
            {"guaranteed-instance-manager-cpu": '{"v1":"10","v2":"12"}'},
            0,
            "4",
            "400m",
            id="T3.4-json-v1",
        ),
        pytest.param(
            "v2",
            {"guaranteed-instance-manager-cpu": '{"v1":"10","v2":"12"}'},
            0,
            "4",
            "480m",
            id="T3.4-json-v2",
        ),
        pytest.param("v2", {"data-engine-number-of-cpu-cores": "2"}, 0, "4", "2", id="4.4-v2-cores-floor"),
        pytest.param(
            "v2",
            {"data-engine-number-of-cpu-cores": "2", "guaranteed-instance-manager-cpu": "40"},
            0,
            "16",
            "7",
            id="4.4-v2-cores-ceil-of-request",
        ),
        pytest.param(
            "v2", {"data-engine-number-of-cpu-cores": "1"}, 2000, "4", "2", id="v2-exact-whole-cores"
        ),
        pytest.param("v2", {"data-engine-number-of-cpu-cores": "1"}, 2001, "4", "3", id="v2-rounds-up"),
        pytest.param("v1", {}, 0, "0", None, id="no-allocatable-no-request"),
    ],
)
def test_formula(
    engine: str, values: dict[str, str], node_request: int, cpu: str, expected: str | None
) -> None:
    assert request(engine, values, node_request=node_request, cpu=cpu) == expected


def test_dz_10_v2_only_change_keeps_v1_request() -> None:
    before = request("v1", {"guaranteed-instance-manager-cpu": '{"v1":"10","v2":"12"}'})
    after = request("v1", {"guaranteed-instance-manager-cpu": '{"v1":"10","v2":"30"}'})
    assert before == after == "400m"


def test_unknown_engine_is_an_error() -> None:
    with pytest.raises(SettingValueError, match="unknown data engine v3"):
        request("v3", {})


def test_missing_kube_node_counts_no_allocatable() -> None:
    settings = DangerZoneSettings.defaults()
    assert instance_manager_cpu_request("v1", settings, longhorn_node(), None) is None


@pytest.mark.parametrize(
    ("a", "b", "same"), [("0.25", "250m", True), (None, None, True), (None, "0", True), ("1", "999m", False)]
)
def test_same_request(a: str | None, b: str | None, same: bool) -> None:
    assert same_cpu_request(a, b) is same


@given(st.integers(1, 128_000), st.floats(0, 40, allow_nan=False))
def test_v1_request_is_percent_of_allocatable(millicpu: int, percent: float) -> None:
    result = request("v1", {"guaranteed-instance-manager-cpu": repr(percent)}, cpu=f"{millicpu}m")
    exact = millicpu * percent / 100
    got = parse_quantity(result) * 1000 if result else 0
    assert abs(got - exact) <= 0.5 + 1e-9
