"""The rest of the API server's contract for the slim Structs: absent fields, empty strings, figures.

Nullable fields have their own table-driven test (test_nullable.py); these are the other things
real objects do that a hand-written fixture rarely does.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from corral_model import longhorn as lh
from corral_model.kinds import KINDS

INT64_MAX = 2**63 - 1


@pytest.mark.parametrize("token", sorted(KINDS))
@pytest.mark.parametrize(
    "body",
    [
        b'{"metadata":{"name":"x"}}',
        b'{"metadata":{"name":"x"},"spec":{},"status":{}}',
    ],
    ids=["bare", "empty-spec-and-status"],
)
def test_every_field_but_the_name_may_be_absent(token: str, body: bytes) -> None:
    """Go `omitempty` drops empty fields: every kind reads an object that has nothing but a name."""
    obj = msgspec.json.decode(body, type=KINDS[token].struct)
    assert obj.metadata.name == "x"
    assert obj.metadata.labels == {} and obj.metadata.resource_version == ""


@pytest.mark.parametrize("token", sorted(KINDS))
def test_an_object_without_a_name_is_refused(token: str) -> None:
    """The one required field: without it an object has no subject on the bus (it goes to LH_DEAD)."""
    with pytest.raises(msgspec.ValidationError, match=r"metadata"):
        msgspec.json.decode(b'{"spec":{}}', type=KINDS[token].struct)


def test_empty_strings_stay_empty_strings() -> None:
    """`""` is a value (a detached volume's nodeID, a condition's lastProbeTime): never None."""
    volume = msgspec.json.decode(
        b'{"metadata":{"name":"v","creationTimestamp":"","namespace":""},'
        b'"spec":{"nodeID":"","image":"","size":""},'
        b'"status":{"currentNodeID":"","ownerID":"","state":""}}',
        type=lh.Volume,
    )
    assert volume.metadata.creation_timestamp == ""
    assert (volume.spec.node_id, volume.spec.image, volume.spec.size) == ("", "", "")
    assert (volume.status.current_node_id, volume.status.owner_id) == ("", "")
    condition = msgspec.json.decode(b'{"type":"Ready","status":"","reason":""}', type=lh.Condition)
    assert condition.status == "" and condition.reason == ""


def test_sizes_are_quoted_int64_strings() -> None:
    body = f'{{"metadata":{{"name":"v"}},"spec":{{"size":"{INT64_MAX}"}},"status":{{"currentSize":"0"}}}}'
    volume = msgspec.json.decode(body.encode(), type=lh.Volume)
    assert volume.spec.size == str(INT64_MAX)
    assert volume.status.current_size == "0"


@pytest.mark.parametrize("figure", [2**32 + 1, 2**53 + 1, INT64_MAX])
def test_other_figures_are_bare_integers_beyond_32_bits(figure: int) -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "ei", "generation": figure},
        "status": {"refCount": figure, "cliAPIVersion": figure, "dataFormatVersion": figure},
    }
    ei = msgspec.json.decode(msgspec.json.encode(body), type=lh.EngineImage)
    assert (ei.metadata.generation, ei.status.ref_count, ei.status.cli_api_version) == (figure,) * 3
    assert ei.status.data_format_version == figure  # exact: no float on the way


def test_unknown_fields_and_nulls_off_the_model_are_skipped() -> None:
    """Fields corral does not model (v1.10's `backupBlockSize`, a null `kubernetesStatus`) are
    never looked at, whatever they hold."""
    volume = msgspec.json.decode(
        b'{"metadata":{"name":"v"},"spec":{"backupBlockSize":"2097152","diskSelector":[]},'
        b'"status":{"kubernetesStatus":{"workloadsStatus":null},"conditions":null}}',
        type=lh.Volume,
    )
    assert volume.metadata.name == "v"
