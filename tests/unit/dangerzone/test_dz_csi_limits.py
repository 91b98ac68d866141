"""`system-managed-csi-components-resource-limits` (spec §3.1, §3.3 group C, T3.7 issue 12224)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.csi_limits import (
    CSI_COMPONENTS,
    CsiResourceLimits,
    parse_csi_limits,
    render_csi_limits,
)
from corral_dangerzone.errors import SettingValueError
from corral_model.longhorn import ResourceRequirements


def test_listed_components_get_their_resources_others_empty() -> None:
    limits = parse_csi_limits(
        '{"csi-attacher": {"requests": {"cpu": "100m", "memory": "50Mi"}, "limits": {"cpu": "200m"}},'
        ' "longhorn-csi-plugin": {"limits": {"memory": "1Gi"}}}'
    )
    assert limits.resources_for("csi-attacher") == ResourceRequirements(
        requests={"cpu": "100m", "memory": "50Mi"}, limits={"cpu": "200m"}
    )
    assert limits.resources_for("longhorn-csi-plugin") == ResourceRequirements(limits={"memory": "1Gi"})
    assert limits.resources_for("csi-resizer") == ResourceRequirements()


@pytest.mark.parametrize("value", ["", "  ", "null", "{}"])
def test_nothing_listed(value: str) -> None:
    assert parse_csi_limits(value) == CsiResourceLimits()


def test_go_json_rules_case_insensitive_keys_unknown_ignored() -> None:
    limits = parse_csi_limits(
        '{"CSI-Attacher": {"Requests": {"cpu": 1}}, "csi-atacher": {"requests": {"cpu": "x"}}}'
    )
    assert limits.components == {"csi-attacher": ResourceRequirements(requests={"cpu": "1"})}


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("not json", id="syntax"),
        pytest.param("[]", id="array"),
        pytest.param('{"csi-attacher": "1"}', id="component-not-object"),
        pytest.param('{"csi-attacher": {"limits": {"cpu": "lots"}}}', id="bad-quantity"),
        pytest.param('{"csi-attacher": {"limits": ["cpu"]}}', id="limits-not-object"),
    ],
)
def test_refused(value: str) -> None:
    with pytest.raises(SettingValueError) as err:
        parse_csi_limits(value)
    assert str(err.value).startswith(f"failed to unmarshal CSI component resource limits {value}: ")


_quantity = st.sampled_from(["100m", "1", "0.5", "2Gi", "128Mi", "1e3", "750k"])
_resources = st.builds(
    ResourceRequirements,
    requests=st.dictionaries(st.sampled_from(["cpu", "memory"]), _quantity, max_size=2),
    limits=st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage"]), _quantity, max_size=3),
)


@given(st.dictionaries(st.sampled_from(CSI_COMPONENTS), _resources, max_size=7))
def test_round_trip(components: dict[str, ResourceRequirements]) -> None:
    limits = CsiResourceLimits(components=components)
    assert parse_csi_limits(render_csi_limits(limits)) == limits
