"""Network settings: admission syntax (spec §3.4) and the Multus annotation text (§3.3, §4.4)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.network import (
    ENDPOINT_NETWORK_INTERFACE,
    STORAGE_NETWORK_INTERFACE,
    CniNetwork,
    cni_annotation,
    parse_cni_network,
    render_cni_network,
    validate_cni_network,
)


@pytest.mark.parametrize(
    ("value", "network"),
    [
        pytest.param("", None, id="3.4-empty-is-none"),
        pytest.param(
            "kube-system/demo-192-168-0-0", CniNetwork("kube-system", "demo-192-168-0-0"), id="T3.9"
        ),
        pytest.param("/", CniNetwork("", ""), id="3.4-empty-parts-not-rejected"),
        pytest.param("ns/", CniNetwork("ns", ""), id="empty-name"),
    ],
)
def test_parse(value: str, network: CniNetwork | None) -> None:
    assert parse_cni_network(value) == network


@pytest.mark.parametrize("value", ["demo", "a/b/c", "//"])
def test_refused(value: str) -> None:
    with pytest.raises(SettingValueError) as err:
        validate_cni_network(value)
    assert (
        str(err.value)
        == f"cni network must be in <NAMESPACE>/<NETWORK-ATTACHMENT-DEFINITION> format: {value}"
    )


def test_storage_network_annotation_text() -> None:
    assert cni_annotation("kube-system/demo", STORAGE_NETWORK_INTERFACE) == (
        '[{"namespace": "kube-system", "name": "demo", "interface": "lhnet1"}]'
    )


def test_endpoint_network_uses_lhnet2() -> None:
    parsed = json.loads(cni_annotation("ns/nad", ENDPOINT_NETWORK_INTERFACE))
    assert parsed == [{"namespace": "ns", "name": "nad", "interface": "lhnet2"}]


@pytest.mark.parametrize("value", ["", "no-slash"])
def test_no_annotation_without_a_slash(value: str) -> None:
    assert cni_annotation(value, STORAGE_NETWORK_INTERFACE) == ""


_part = st.text(st.characters(codec="ascii", categories=("L", "N"), include_characters=".-"), max_size=12)


@given(st.builds(CniNetwork, _part, _part))
def test_round_trip(network: CniNetwork) -> None:
    assert parse_cni_network(render_cni_network(network)) == network
    annotation = json.loads(cni_annotation(render_cni_network(network), STORAGE_NETWORK_INTERFACE))
    assert annotation == [{"namespace": network.namespace, "name": network.name, "interface": "lhnet1"}]
