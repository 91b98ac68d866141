"""Write semantics (create, update, patch, delete, status, dry run) through kubernetes-asyncio."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from corral_sandbox.emulator import Emulator
from tests.integration.emulator.support import LH, MERGE, NS, create_volume, crs, patch_volume, volume


def status_of(error: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = msgspec.json.decode(error.body or b"{}")
    return body


async def test_create_assigns_identity_and_refuses_duplicates(kube_api: client.ApiClient) -> None:
    """kube-apiserver: create sets uid, creationTimestamp, resourceVersion, generation 1; creating the same
    name again is 409 AlreadyExists with a Status body."""
    created = await create_volume(kube_api, "v")
    meta = created["metadata"]
    assert meta["uid"] and meta["creationTimestamp"].endswith("Z")
    assert meta["generation"] == 1 and int(meta["resourceVersion"]) > 0
    with pytest.raises(ApiException) as raised:
        await create_volume(kube_api, "v")
    status = status_of(raised.value)
    assert raised.value.status == 409
    assert (
        status["kind"] == "Status" and status["status"] == "Failure" and status["reason"] == "AlreadyExists"
    )
    assert status["message"] == 'volumes.longhorn.io "v" already exists'
    assert status["details"] == {"name": "v", "group": "longhorn.io", "kind": "volumes"}


async def test_get_missing_is_404_not_found(kube_api: client.ApiClient) -> None:
    """kube-apiserver: GET of a missing object is 404 with reason NotFound."""
    with pytest.raises(ApiException) as raised:
        await crs(kube_api).get_namespaced_custom_object(*LH, NS, "volumes", "nope")
    assert raised.value.status == 404
    assert status_of(raised.value)["message"] == 'volumes.longhorn.io "nope" not found'


async def test_resource_versions_are_global_and_strictly_increasing(kube_api: client.ApiClient) -> None:
    """kube-apiserver (etcd): one revision counter orders writes across all resource types."""
    a = await create_volume(kube_api, "a")
    cm = await client.CoreV1Api(kube_api).create_namespaced_config_map(
        NS, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"))
    )
    b = await patch_volume(kube_api, "a", {"spec": {"size": "1"}})
    assert (
        int(a["metadata"]["resourceVersion"])
        < int(cm.metadata.resource_version)
        < int(b["metadata"]["resourceVersion"])
    )


async def test_update_with_stale_resource_version_is_409_conflict(kube_api: client.ApiClient) -> None:
    """kube-apiserver: PUT with a resourceVersion other than the current one is 409 Conflict
    ("the object has been modified"); with the current one it succeeds."""
    old = await create_volume(kube_api, "v")
    await patch_volume(kube_api, "v", {"spec": {"size": "1"}})
    old["spec"]["size"] = "2"
    with pytest.raises(ApiException) as raised:
        await crs(kube_api).replace_namespaced_custom_object(*LH, NS, "volumes", "v", old)
    assert raised.value.status == 409
    status = status_of(raised.value)
    assert status["reason"] == "Conflict" and "the object has been modified" in status["message"]
    fresh = await crs(kube_api).get_namespaced_custom_object(*LH, NS, "volumes", "v")
    fresh["spec"]["size"] = "2"
    replaced = await crs(kube_api).replace_namespaced_custom_object(*LH, NS, "volumes", "v", fresh)
    assert replaced["spec"]["size"] == "2"


async def test_merge_patch_null_deletes_a_key(kube_api: client.ApiClient) -> None:
    """RFC 7386 as kube-apiserver applies it: objects merge, null removes a key, lists are replaced."""
    await create_volume(kube_api, "v", size="10", frontend="blockdev")
    await patch_volume(kube_api, "v", {"metadata": {"annotations": {"a": "1", "b": "2"}}})
    patched = await patch_volume(
        kube_api, "v", {"spec": {"frontend": None, "tags": ["x"]}, "metadata": {"annotations": {"a": None}}}
    )
    assert "frontend" not in patched["spec"] and patched["spec"]["size"] == "10"
    assert patched["spec"]["tags"] == ["x"]
    assert patched["metadata"]["annotations"] == {"b": "2"}
    strategic = await patch_volume(
        kube_api, "v", {"spec": {"size": "11"}}, _content_type="application/strategic-merge-patch+json"
    )
    assert strategic["spec"]["size"] == "11"


async def test_json_patch_failed_test_is_422(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver: a JSON Patch whose `test` operation fails is refused whole with 422 Unprocessable
    Entity; a passing test applies the rest (corral's field-level preconditions rely on both)."""
    await create_volume(kube_api, "v", image="img-a")
    before = emulator.resource_version
    with pytest.raises(ApiException) as raised:
        await patch_volume(
            kube_api,
            "v",
            [
                {"op": "test", "path": "/spec/image", "value": "img-b"},
                {"op": "replace", "path": "/spec/image", "value": "c"},
            ],
        )
    assert raised.value.status == 422
    assert status_of(raised.value)["reason"] == "Invalid"
    assert emulator.resource_version == before
    ok = await patch_volume(
        kube_api,
        "v",
        [
            {"op": "test", "path": "/spec/image", "value": "img-a"},
            {"op": "replace", "path": "/spec/image", "value": "img-c"},
        ],
    )
    assert ok["spec"]["image"] == "img-c"


async def test_json_patch_content_type_with_an_object_body_is_400(kube_api: client.ApiClient) -> None:
    """kube-apiserver: a JSON Patch body must be an array; CustomObjectsApi sends a dict body as
    json-patch unless told `_content_type`, and the real server refuses that with 400."""
    await create_volume(kube_api, "v")
    with pytest.raises(ApiException) as raised:
        await crs(kube_api).patch_namespaced_custom_object(*LH, NS, "volumes", "v", {"spec": {"size": "1"}})
    assert raised.value.status == 400


async def test_generation_bumps_on_spec_changes_only(kube_api: client.ApiClient) -> None:
    """kube-apiserver (CRDs with a status subresource): metadata.generation increases when anything
    outside metadata and status changes, not for label or status changes, and not for no-op writes."""
    await create_volume(kube_api, "v")
    labelled = await patch_volume(kube_api, "v", {"metadata": {"labels": {"a": "b"}}})
    assert labelled["metadata"]["generation"] == 1
    status = await crs(kube_api).patch_namespaced_custom_object_status(
        *LH, NS, "volumes", "v", {"status": {"state": "attached"}}, _content_type=MERGE
    )
    assert status["metadata"]["generation"] == 1
    spec = await patch_volume(kube_api, "v", {"spec": {"size": "5"}})
    assert spec["metadata"]["generation"] == 2
    same = await patch_volume(kube_api, "v", {"spec": {"size": "5"}})
    assert same["metadata"]["generation"] == 2
    assert same["metadata"]["resourceVersion"] == spec["metadata"]["resourceVersion"]


async def test_generation_bumps_with_an_admission_hook_installed(
    kube_api: client.ApiClient, emulator: Emulator
) -> None:
    """As above with a webhook on the kind (the sandbox installs Longhorn's on volumes): the write
    the hook judged still bumps metadata.generation. It did not, so a volume rolled back to its
    old spec looked like the spec an earlier command was decided on (engine-upgrade/rolled-back)."""
    emulator.register_admission("longhorn.io", "volumes", lambda op, old, new: None, name="any.longhorn.io")
    await create_volume(kube_api, "v")
    spec = await patch_volume(kube_api, "v", {"spec": {"size": "5"}})
    assert spec["metadata"]["generation"] == 2


async def test_setting_value_at_top_level_counts_as_spec(kube_api: client.ApiClient) -> None:
    """Longhorn's Setting keeps `value` beside metadata: changing it is a spec change (generation bump)."""
    body = {"apiVersion": "longhorn.io/v1beta2", "kind": "Setting", "metadata": {"name": "s"}, "value": "1"}
    await crs(kube_api).create_namespaced_custom_object(*LH, NS, "settings", body)
    patched = await crs(kube_api).patch_namespaced_custom_object(
        *LH, NS, "settings", "s", {"value": "2"}, _content_type=MERGE
    )
    assert patched["value"] == "2" and patched["metadata"]["generation"] == 2


async def test_status_subresource_separation(kube_api: client.ApiClient) -> None:
    """kube-apiserver (status subresource): writes to the main resource ignore status; writes to /status
    change only status; create drops the status it is given."""
    created = await crs(kube_api).create_namespaced_custom_object(
        *LH, NS, "volumes", {**volume("v"), "status": {"state": "attached"}}
    )
    assert "status" not in created
    via_status = await crs(kube_api).patch_namespaced_custom_object_status(
        *LH,
        NS,
        "volumes",
        "v",
        {"status": {"state": "detached"}, "spec": {"image": "evil"}},
        _content_type=MERGE,
    )
    assert via_status["status"] == {"state": "detached"} and via_status["spec"]["image"] == "img-a"
    via_main = await patch_volume(
        kube_api, "v", {"status": {"state": "attached"}, "spec": {"image": "img-b"}}
    )
    assert via_main["status"] == {"state": "detached"} and via_main["spec"]["image"] == "img-b"
    current = await crs(kube_api).get_namespaced_custom_object_status(*LH, NS, "volumes", "v")
    current["status"]["robustness"] = "healthy"
    replaced = await crs(kube_api).replace_namespaced_custom_object_status(*LH, NS, "volumes", "v", current)
    assert replaced["status"] == {"state": "detached", "robustness": "healthy"}


async def test_finalizers_hold_deletion_until_removed(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver: DELETE of an object with finalizers only sets deletionTimestamp; the object goes
    away when an update empties its finalizers; new finalizers cannot be added meanwhile."""
    await crs(kube_api).create_namespaced_custom_object(
        *LH, NS, "volumes", {**volume("v"), "metadata": {"name": "v", "finalizers": ["longhorn.io"]}}
    )
    marked = await crs(kube_api).delete_namespaced_custom_object(*LH, NS, "volumes", "v")
    assert marked["metadata"]["deletionTimestamp"]
    assert emulator.get(*LH[:1], "volumes", NS, "v") is not None
    with pytest.raises(ApiException) as raised:
        await patch_volume(kube_api, "v", {"metadata": {"finalizers": ["longhorn.io", "other"]}})
    assert raised.value.status == 422
    await patch_volume(kube_api, "v", {"metadata": {"finalizers": None}})
    assert emulator.get("longhorn.io", "volumes", NS, "v") is None


async def test_delete_preconditions(kube_api: client.ApiClient) -> None:
    """kube-apiserver: DeleteOptions.preconditions (uid, resourceVersion) that do not hold are 409."""
    created = await create_volume(kube_api, "v")
    with pytest.raises(ApiException) as raised:
        await crs(kube_api).delete_namespaced_custom_object(
            *LH,
            NS,
            "volumes",
            "v",
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other")),
        )
    assert raised.value.status == 409 and "Precondition failed" in status_of(raised.value)["message"]
    await crs(kube_api).delete_namespaced_custom_object(
        *LH,
        NS,
        "volumes",
        "v",
        body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=created["metadata"]["uid"])),
    )


async def test_dry_run_changes_nothing(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver: dryRun=All validates and answers as if written, but stores nothing and does not
    advance the resourceVersion."""
    await create_volume(kube_api, "v")
    before = emulator.resource_version
    answered = await patch_volume(kube_api, "v", {"spec": {"image": "img-z"}}, dry_run="All")
    assert answered["spec"]["image"] == "img-z"
    await crs(kube_api).create_namespaced_custom_object(*LH, NS, "volumes", volume("w"), dry_run="All")
    await crs(kube_api).delete_namespaced_custom_object(*LH, NS, "volumes", "v", dry_run="All")
    assert emulator.resource_version == before
    stored = emulator.get("longhorn.io", "volumes", NS, "v")
    assert stored is not None and stored["spec"]["image"] == "img-a"
    assert emulator.get("longhorn.io", "volumes", NS, "w") is None
    assert emulator.write_log.count(dry_run=True) == 3


async def test_admission_hook_denies_like_a_webhook(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver: a validating webhook's denial reaches the client as `admission webhook "<name>"
    denied the request: <message>` and nothing is stored."""

    def no_delete(operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
        return "the default engine image cannot be deleted" if operation == "DELETE" else None

    emulator.register_admission("longhorn.io", "engineimages", no_delete, name="validator.longhorn.io")
    body = {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "EngineImage",
        "metadata": {"name": "ei-1"},
        "spec": {"image": "x"},
    }
    await crs(kube_api).create_namespaced_custom_object(*LH, NS, "engineimages", body)
    with pytest.raises(ApiException) as raised:
        await crs(kube_api).delete_namespaced_custom_object(*LH, NS, "engineimages", "ei-1")
    assert raised.value.status == 400
    assert status_of(raised.value)["message"] == (
        'admission webhook "validator.longhorn.io" denied the request: '
        "the default engine image cannot be deleted"
    )
    assert emulator.get("longhorn.io", "engineimages", NS, "ei-1") is not None


async def test_mutating_hook_changes_what_is_stored(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver: a mutating webhook's changes are what gets stored and returned."""

    def default_image(
        operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> dict[str, Any] | None:
        if new is not None and not new["spec"].get("image"):
            new["spec"]["image"] = "default-image"
            return new
        return None

    emulator.register_mutation("longhorn.io", "volumes", default_image)
    created = await create_volume(kube_api, "v", image="")
    assert created["spec"]["image"] == "default-image"


async def test_write_log_records_successful_writes(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """Sandbox-only oracle: every successful write is logged with its verb and new resourceVersion."""
    emulator.write_log.clear()
    await create_volume(kube_api, "v")
    patched = await patch_volume(kube_api, "v", [{"op": "replace", "path": "/spec/image", "value": "b"}])
    with pytest.raises(ApiException):
        await create_volume(kube_api, "v")
    records = emulator.write_log.records(plural="volumes")
    assert [(r.verb, r.name) for r in records] == [("create", "v"), ("patch", "v")]
    assert records[1].resource_version == int(patched["metadata"]["resourceVersion"])
    assert records[1].patch_type == "json"


async def test_update_and_status_of_builtin_workloads(kube_api: client.ApiClient) -> None:
    """kube-apiserver: apps/v1 DaemonSets track generation and keep status behind /status."""
    apps = client.AppsV1Api(kube_api)
    ds = client.V1DaemonSet(
        metadata=client.V1ObjectMeta(name="engine-image-ei-1"),
        spec=client.V1DaemonSetSpec(
            selector=client.V1LabelSelector(match_labels={"app": "ei"}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": "ei"}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")]),
            ),
        ),
    )
    created = await apps.create_namespaced_daemon_set(NS, ds)
    assert created.metadata.generation == 1
    patched = await apps.patch_namespaced_daemon_set(
        "engine-image-ei-1", NS, {"spec": {"template": {"spec": {"priorityClassName": "high"}}}}
    )
    assert patched.metadata.generation == 2
    status = await apps.patch_namespaced_daemon_set_status(
        "engine-image-ei-1",
        NS,
        {
            "status": {
                "numberReady": 3,
                "desiredNumberScheduled": 3,
                "currentNumberScheduled": 3,
                "numberMisscheduled": 0,
            }
        },
    )
    assert status.status.number_ready == 3 and status.metadata.generation == 2


async def test_delete_collection_by_label(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver deletecollection: every object matching the selector is deleted (finalizers still
    hold theirs), the rest stay."""
    await create_volume(kube_api, "a", labels={"gc": "yes"})
    await create_volume(kube_api, "b", labels={"gc": "no"})
    await crs(kube_api).create_namespaced_custom_object(
        *LH,
        NS,
        "volumes",
        {**volume("c"), "metadata": {"name": "c", "labels": {"gc": "yes"}, "finalizers": ["x"]}},
    )
    await crs(kube_api).delete_collection_namespaced_custom_object(
        *LH, NS, "volumes", label_selector="gc=yes"
    )
    remaining = {v["metadata"]["name"]: v["metadata"] for v in emulator.list("longhorn.io", "volumes", NS)}
    assert sorted(remaining) == ["b", "c"]
    assert remaining["c"].get("deletionTimestamp")


async def test_malformed_metadata_is_refused(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver's decoder: labels must be a string map and finalizers a string list (400), and a
    refused write leaves the stored object as it was."""
    await create_volume(kube_api, "v")
    for bad in ({"labels": {"a": 1}}, {"labels": ["a"]}, {"finalizers": "x"}):
        with pytest.raises(ApiException) as raised:
            await patch_volume(kube_api, "v", {"metadata": bad})
        assert raised.value.status == 400
    with pytest.raises(ApiException):
        await crs(kube_api).create_namespaced_custom_object(
            *LH, NS, "volumes", {**volume("w"), "metadata": {"name": "w", "annotations": {"a": None}}}
        )
    listed = await crs(kube_api).list_namespaced_custom_object(*LH, NS, "volumes", label_selector="a")
    assert listed["items"] == [] and emulator.get("longhorn.io", "volumes", NS, "w") is None
