"""Reading the facts through kubernetes-asyncio, read-only: the managers (in the request's
namespace), Longhorn's nodes and their `DataEngineUpgradeRequested` condition, and the
`default-instance-manager-image` setting (both in Longhorn's namespace). What the chart's RBAC
for this server grants, and nothing more: get/list on those three resources."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client

from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION, LONGHORN_GROUP, LONGHORN_VERSION
from corral_v2_admission.facts import Fact, LazyFacts
from corral_v2admission import DEFAULT_IM_IMAGE, MANAGERS, condition_true


class ClusterReader:
    def __init__(self, api: client.ApiClient, longhorn_namespace: str, timeout_s: float) -> None:
        self._objects = client.CustomObjectsApi(api)
        self._namespace = longhorn_namespace
        self._timeout = timeout_s

    def for_namespace(self, namespace: str) -> RequestReader:
        return RequestReader(self, namespace or self._namespace)

    async def managers(self, namespace: str) -> dict[str, str]:
        listing = await self._call(
            self._objects.list_namespaced_custom_object(CORRAL_GROUP, CORRAL_VERSION, namespace, MANAGERS)
        )
        return {
            str(m["metadata"]["name"]): str((m.get("status") or {}).get("state") or "")
            for m in listing.get("items") or []
        }

    async def nodes(self) -> dict[str, bool]:
        listing = await self._call(
            self._objects.list_namespaced_custom_object(
                LONGHORN_GROUP, LONGHORN_VERSION, self._namespace, "nodes"
            )
        )
        return {str(n["metadata"]["name"]): condition_true(n) for n in listing.get("items") or []}

    async def instance_manager_image(self) -> str:
        try:
            setting = await self._call(
                self._objects.get_namespaced_custom_object(
                    LONGHORN_GROUP, LONGHORN_VERSION, self._namespace, "settings", DEFAULT_IM_IMAGE
                )
            )
        except client.ApiException as error:
            if error.status == 404:
                return ""  # a target image no volume can already have, nor be switched to
            raise
        return str(setting.get("value") or "")

    async def _call(self, call: Any) -> dict[str, Any]:
        answer: dict[str, Any] = await asyncio.wait_for(call, self._timeout)
        return answer


class RequestReader:
    """The `Reader` of one request (`facts.judge`): managers in the request's namespace."""

    def __init__(self, cluster: ClusterReader, namespace: str) -> None:
        self._cluster = cluster
        self._namespace = namespace

    async def __call__(self, fact: Fact, facts: LazyFacts) -> None:
        if fact is Fact.MANAGERS:
            facts.managers = await self._cluster.managers(self._namespace)
        elif fact is Fact.NODES:
            facts.nodes = await self._cluster.nodes()
        else:
            facts.image = await self._cluster.instance_manager_image()
