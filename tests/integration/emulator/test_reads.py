"""Lists, selectors, pagination and discovery through kubernetes-asyncio."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from corral_sandbox.emulator import Emulator
from tests.integration.emulator.support import LH, NS, create_volume, crs


def names(listed: dict[str, object]) -> list[str]:
    return [i["metadata"]["name"] for i in listed["items"]]  # type: ignore[attr-defined]


async def test_label_selectors(kube_api: client.ApiClient) -> None:
    """kube-apiserver label selector grammar: =, ==, !=, in, notin, exists, !exists, comma = AND."""
    await create_volume(kube_api, "a", labels={"tier": "gold", "zone": "1"})
    await create_volume(kube_api, "b", labels={"tier": "silver"})
    await create_volume(kube_api, "c", labels={})
    cases = {
        "tier=gold": ["a"],
        "tier==gold": ["a"],
        "tier!=gold": ["b", "c"],
        "tier in (gold, silver)": ["a", "b"],
        "tier notin (gold)": ["b", "c"],
        "zone": ["a"],
        "!zone": ["b", "c"],
        "tier,!zone": ["b"],
        "tier=gold,zone=2": [],
    }
    for selector, expected in cases.items():
        listed = await crs(kube_api).list_namespaced_custom_object(
            *LH, NS, "volumes", label_selector=selector
        )
        assert names(listed) == expected, selector


async def test_field_selectors_and_namespaces(kube_api: client.ApiClient) -> None:
    """kube-apiserver: metadata.name / metadata.namespace field selectors; listing across namespaces."""
    await create_volume(kube_api, "a")
    await create_volume(kube_api, "b")
    body = {"apiVersion": "longhorn.io/v1beta2", "kind": "Volume", "metadata": {"name": "a"}, "spec": {}}
    await crs(kube_api).create_namespaced_custom_object(*LH, "default", "volumes", body)
    by_name = await crs(kube_api).list_namespaced_custom_object(
        *LH, NS, "volumes", field_selector="metadata.name=a"
    )
    assert names(by_name) == ["a"]
    everywhere = await crs(kube_api).list_cluster_custom_object(
        *LH, "volumes", field_selector="metadata.name=a"
    )
    assert [i["metadata"]["namespace"] for i in everywhere["items"]] == ["default", NS]
    not_ns = await crs(kube_api).list_cluster_custom_object(
        *LH, "volumes", field_selector=f"metadata.namespace!={NS}"
    )
    assert names(not_ns) == ["a"] and not_ns["items"][0]["metadata"]["namespace"] == "default"


async def test_pagination_with_limit_and_continue(kube_api: client.ApiClient, emulator: Emulator) -> None:
    """kube-apiserver: limit returns a page plus metadata.continue; following it yields every object once."""
    emulator.load(
        "longhorn.io",
        "volumes",
        [
            {
                "apiVersion": "longhorn.io/v1beta2",
                "kind": "Volume",
                "metadata": {"name": f"v{i:03}", "namespace": NS},
            }
            for i in range(25)
        ],
    )
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = await crs(kube_api).list_namespaced_custom_object(
            *LH, NS, "volumes", limit=10, _continue=token
        )
        seen += names(page)
        pages += 1
        token = page["metadata"].get("continue")
        if not token:
            break
    assert pages == 3 and seen == [f"v{i:03}" for i in range(25)]


async def test_missing_resource_type_is_404(kube_api: client.ApiClient) -> None:
    """kube-apiserver: an unknown resource answers 404 "the server could not find the requested resource"."""
    with pytest.raises(ApiException) as raised:
        await crs(kube_api).list_namespaced_custom_object("longhorn.io", "v1beta2", NS, "backups")
    assert raised.value.status == 404


async def test_discovery_lists_builtins_and_crds(kube_api: client.ApiClient) -> None:
    """kube-apiserver discovery: /api, /apis, group-version resource lists (with status subresources) and
    /version decode into kubernetes-asyncio's typed models."""
    versions = await client.CoreApi(kube_api).get_api_versions()
    assert versions.versions == ["v1"]
    groups = {g.name for g in (await client.ApisApi(kube_api).get_api_versions()).groups}
    assert {"apps", "coordination.k8s.io", "scheduling.k8s.io", "longhorn.io", "corral.longhorn.io"} <= groups
    core = await client.CoreV1Api(kube_api).get_api_resources()
    assert {"pods", "pods/status", "nodes", "configmaps", "events", "namespaces"} <= {
        r.name for r in core.resources
    }
    lh = await client.CustomObjectsApi(kube_api).get_api_resources("longhorn.io", "v1beta2")
    assert {
        "volumes",
        "volumes/status",
        "engines",
        "replicas",
        "engineimages",
        "nodes",
        "settings",
        "instancemanagers",
    } <= {r.name for r in lh.resources}
    version = await client.VersionApi(kube_api).get_code()
    assert version.major == "1"


async def test_crds_are_installed_and_new_ones_served(kube_api: client.ApiClient) -> None:
    """apiextensions.k8s.io: the deploy/crds CRDs exist and Established; creating a CRD serves its kind."""
    ext: Any = client.ApiextensionsV1Api(kube_api)  # a plain dict body, as `kubectl apply` would send
    crds = await ext.list_custom_resource_definition()
    installed = {c.metadata.name for c in crds.items}
    assert {"volumes.longhorn.io", "dataengineupgrademanagers.corral.longhorn.io"} <= installed
    established = next(c for c in crds.items if c.metadata.name == "volumes.longhorn.io")
    assert any(c.type == "Established" and c.status == "True" for c in established.status.conditions)
    await ext.create_custom_resource_definition(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "backups.longhorn.io"},
            "spec": {
                "group": "longhorn.io",
                "scope": "Namespaced",
                "names": {
                    "plural": "backups",
                    "singular": "backup",
                    "kind": "Backup",
                    "listKind": "BackupList",
                },
                "versions": [
                    {
                        "name": "v1beta2",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                ],
            },
        }
    )
    body = {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Backup",
        "metadata": {"name": "b"},
        "status": {"x": 1},
    }
    created = await crs(kube_api).create_namespaced_custom_object(*LH, NS, "backups", body)
    assert created["status"] == {"x": 1}  # no status subresource: status is ordinary content


async def test_core_kinds_round_trip(kube_api: client.ApiClient) -> None:
    """kube-apiserver: Nodes (cluster-scoped, created with status), Leases, PriorityClasses, Events,
    Deployments through their typed APIs."""
    core = client.CoreV1Api(kube_api)
    node = await core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(name="node-1"),
            status=client.V1NodeStatus(allocatable={"cpu": "4"}),
        )
    )
    assert node.status.allocatable == {"cpu": "4"} and node.metadata.namespace is None
    lease = await client.CoordinationV1Api(kube_api).create_namespaced_lease(
        NS,
        client.V1Lease(metadata=client.V1ObjectMeta(name="l"), spec=client.V1LeaseSpec(holder_identity="me")),
    )
    assert lease.spec.holder_identity == "me"
    pc = await client.SchedulingV1Api(kube_api).create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name="high"), value=1000)
    )
    assert pc.value == 1000
    await core.create_namespaced_event(
        NS,
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="e"),
            involved_object=client.V1ObjectReference(name="v"),
            reason="R",
        ),
    )
    deploy = await client.AppsV1Api(kube_api).create_namespaced_deployment(
        NS,
        client.V1Deployment(
            metadata=client.V1ObjectMeta(name="d"),
            spec=client.V1DeploymentSpec(
                selector=client.V1LabelSelector(match_labels={"a": "b"}),
                template=client.V1PodTemplateSpec(
                    metadata=client.V1ObjectMeta(labels={"a": "b"}),
                    spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")]),
                ),
            ),
        ),
    )
    assert deploy.metadata.generation == 1
    nodes = await core.list_node()
    assert [n.metadata.name for n in nodes.items] == ["node-1"]
