"""The emulator keeps a `null` only where the CRD says `nullable: true`, on every kind of write.

Longhorn v1.10's Engine schema (deploy/crds) marks `status.replicaModeMap` and
`status.currentReplicaAddressMap` nullable and not `spec.replicaAddressMap` or
`status.replicaTransitionTimeMap`; the apiextensions server prunes the null of the latter on create,
update, merge and JSON patch and status writes, and keeps the null of the former. Nulls under the
open (unmodelled) part of the schema are kept, as the server keeps them.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from corral_sandbox.emulator import Emulator
from corral_sandbox.emulator.nulls import prune_nulls
from tests.integration.emulator.support import LH, MERGE, NS, crs

JSON_PATCH = "application/json-patch+json"


def engine(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Engine",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"volumeName": "vol", "replicaAddressMap": None, "notInTheSchema": None},
    }


async def _create(api: client.ApiClient, name: str) -> dict[str, Any]:
    result: dict[str, Any] = await crs(api).create_namespaced_custom_object(*LH, NS, "engines", engine(name))
    return result


async def _status(api: client.ApiClient, name: str, body: Any, content_type: str) -> dict[str, Any]:
    result: dict[str, Any] = await crs(api).patch_namespaced_custom_object_status(
        *LH, NS, "engines", name, body, _content_type=content_type
    )
    return result


async def test_create_prunes_a_non_nullable_null_and_keeps_an_unmodelled_one(
    emulator: Emulator, kube_api: client.ApiClient
) -> None:
    created = await _create(kube_api, "e-create")
    assert "replicaAddressMap" not in created["spec"]
    assert created["spec"]["notInTheSchema"] is None
    stored = emulator.get("longhorn.io", "engines", NS, "e-create")
    assert stored is not None and "replicaAddressMap" not in stored["spec"]


async def test_status_writes_keep_nullable_nulls_and_prune_the_rest(
    emulator: Emulator, kube_api: client.ApiClient
) -> None:
    await _create(kube_api, "e-status")
    ops = [
        {
            "op": "add",
            "path": "/status",
            "value": {
                "replicaModeMap": None,
                "currentReplicaAddressMap": None,
                "replicaTransitionTimeMap": None,
                "conditions": None,
                "currentState": "stopped",
            },
        }
    ]
    patched = await _status(kube_api, "e-status", ops, JSON_PATCH)
    assert patched["status"] == {
        "replicaModeMap": None,
        "currentReplicaAddressMap": None,
        "conditions": None,
        "currentState": "stopped",
    }
    # PUT of the status subresource, the way Longhorn's controllers write (UpdateStatus)
    patched["status"]["replicaTransitionTimeMap"] = None
    patched["status"]["replicaModeMap"] = {"r-1": "RW"}
    updated: dict[str, Any] = await crs(kube_api).replace_namespaced_custom_object_status(
        *LH, NS, "engines", "e-status", patched
    )
    assert "replicaTransitionTimeMap" not in updated["status"]
    assert updated["status"]["replicaModeMap"] == {"r-1": "RW"}
    assert updated["status"]["currentReplicaAddressMap"] is None


async def test_update_and_merge_patch_prune_non_nullable_nulls(kube_api: client.ApiClient) -> None:
    created = await _create(kube_api, "e-update")
    created["spec"]["upgradedReplicaAddressMap"] = None
    created["spec"]["replicaAddressMap"] = {"r-1": "10.0.0.1:10000"}
    updated: dict[str, Any] = await crs(kube_api).replace_namespaced_custom_object(
        *LH, NS, "engines", "e-update", created
    )
    assert "upgradedReplicaAddressMap" not in updated["spec"]
    # a merge patch's null deletes the key, as RFC 7386 says, whatever the schema
    merged: dict[str, Any] = await crs(kube_api).patch_namespaced_custom_object(
        *LH, NS, "engines", "e-update", {"spec": {"replicaAddressMap": None}}, _content_type=MERGE
    )
    assert "replicaAddressMap" not in merged["spec"]
    jsoned: dict[str, Any] = await crs(kube_api).patch_namespaced_custom_object(
        *LH,
        NS,
        "engines",
        "e-update",
        [{"op": "add", "path": "/spec/upgradedReplicaAddressMap", "value": None}],
        _content_type=JSON_PATCH,
    )
    assert "upgradedReplicaAddressMap" not in jsoned["spec"]


def test_prune_nulls_walks_maps_and_lists_and_copies_on_write() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "disks": {
                "type": "object",
                "additionalProperties": {
                    "type": "object",
                    "properties": {
                        "tags": {"type": "array"},
                        "scheduledReplica": {"type": "object", "nullable": True},
                    },
                },
            },
            "conditions": {"type": "array", "items": {"type": "object", "properties": {"reason": {}}}},
            "defaulted": {"type": "object", "default": {}},
        },
    }
    value = {
        "disks": {"d": {"tags": None, "scheduledReplica": None}},
        "conditions": [{"reason": None, "other": None}],
        "defaulted": None,
    }
    assert prune_nulls(value, schema) == {
        "disks": {"d": {"scheduledReplica": None}},
        "conditions": [{"other": None}],
        "defaulted": None,
    }
    assert value["disks"] == {"d": {"tags": None, "scheduledReplica": None}}, "the input is unchanged"
    clean = {"disks": {"d": {"tags": ["ssd"]}}}
    assert prune_nulls(clean, schema) is clean
