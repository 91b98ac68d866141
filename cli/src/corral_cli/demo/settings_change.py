"""What an operator does in the setting-sync demo, through the Kubernetes API: change danger-zone
settings while volumes are attached, then detach the volumes.

As in engine_wave.py, the demo is an API client like any other (kubernetes-asyncio against the
sandbox's API server) and does only what a person would: merge-patch the Settings' values and
clear the volumes' `spec.nodeID` (Longhorn's detach). Applying the settings is setting-sync's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from kubernetes_asyncio import client

from corral_cli.demo.engine_wave import GROUP, MERGE_PATCH, VERSION
from corral_kube.client import connected

DEMO_SETTINGS: Mapping[str, str] = {
    "priority-class": "system-cluster-critical",
    "taint-toleration": "demo.corral.io/maintenance=true:NoSchedule",
}
"""Two group-A settings: a built-in PriorityClass (it exists in any cluster) and a toleration."""
API_TIMEOUT_S = 30.0


async def attached_volumes(kubeconfig: str, namespace: str) -> list[str]:
    """Volumes asked to be attached (`spec.nodeID` set), by name."""
    async with asyncio.timeout(API_TIMEOUT_S), connected(kubeconfig) as api:
        answer = await client.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, "volumes"
        )
    return sorted(v["metadata"]["name"] for v in answer["items"] if (v.get("spec") or {}).get("nodeID"))


async def change_settings(kubeconfig: str, namespace: str, values: Mapping[str, str]) -> None:
    async with asyncio.timeout(API_TIMEOUT_S), connected(kubeconfig) as api:
        objects = client.CustomObjectsApi(api)
        for name, value in values.items():
            await objects.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "settings",
                name,
                {"value": value},
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )


async def detach(kubeconfig: str, namespace: str, volumes: list[str]) -> None:
    async with asyncio.timeout(API_TIMEOUT_S), connected(kubeconfig) as api:
        objects = client.CustomObjectsApi(api)
        for name in volumes:
            await objects.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "volumes",
                name,
                {"spec": {"nodeID": ""}},
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )
