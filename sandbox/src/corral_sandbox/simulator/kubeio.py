"""The simulator's wire: list, watch, create, merge-patch and delete raw objects through a
kubernetes-asyncio ApiClient, exactly as any client of a real API server.

Raw JSON (no generated models) so every field survives, and one code path for custom resources,
pods and nodes alike. Watches yield `(type, object)`; a `410 Gone` surfaces as `WatchExpired` so the
caller re-lists.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from corral_sandbox.simulator.nulls import as_json_patch, has_null
from corral_sandbox.simulator.view import KINDS, Obj

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class WatchExpired(Exception):
    """The watch's resourceVersion is older than the server's history (410 Gone): list again."""


def collection_path(kind: str, namespace: str) -> str:
    group, version, plural, namespaced = KINDS[kind]
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespaced:
        base += f"/namespaces/{namespace}"
    return f"{base}/{plural}"


class KubeIO:
    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._api = api
        self._namespace = namespace

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        result = await self._api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Accept": "application/json", "Content-Type": content_type},
            body=body,
            auth_settings=["BearerToken"],
            response_types_map={200: "object", 201: "object", 202: "object"},
            _return_http_data_only=True,
            _preload_content=True,
        )
        return result if isinstance(result, dict) else {}

    async def list(self, kind: str) -> tuple[list[Obj], str]:
        answer = await self._call("GET", collection_path(kind, self._namespace))
        items = answer.get("items", []) or []
        return items, str(answer.get("metadata", {}).get("resourceVersion", ""))

    async def get(self, kind: str, name: str) -> Obj:
        return await self._call("GET", f"{collection_path(kind, self._namespace)}/{name}")

    async def create(self, kind: str, obj: Obj) -> Obj:
        return await self._call("POST", collection_path(kind, self._namespace), body=obj)

    async def patch(
        self, kind: str, name: str, body: Obj, *, status: bool = False, observed: Obj | None = None
    ) -> Obj:
        """A merge patch; one holding a literal `NULL` (nulls.py) goes as a JSON Patch against the
        object as `observed`, since a merge patch's null deletes."""
        path = f"{collection_path(kind, self._namespace)}/{name}" + ("/status" if status else "")
        if has_null(body):
            ops = as_json_patch(body, observed or {})
            return await self._call("PATCH", path, body=ops, content_type=JSON_PATCH)
        return await self._call("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def put_status(self, kind: str, name: str, status: Obj) -> Obj:
        """Set the whole status as given, literal nulls included (a JSON Patch `add` of /status)."""
        path = f"{collection_path(kind, self._namespace)}/{name}/status"
        ops = [{"op": "add", "path": "/status", "value": status}]
        return await self._call("PATCH", path, body=ops, content_type=JSON_PATCH)

    async def delete(self, kind: str, name: str, uid: str = "") -> Obj:
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        return await self._call("DELETE", f"{collection_path(kind, self._namespace)}/{name}", body=body)

    async def watch(
        self, kind: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[str, Obj]]:
        query = [
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        response = await self._api.call_api(
            collection_path(kind, self._namespace),
            "GET",
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout_seconds + 30,
        )
        try:
            if response.status >= 400:
                text = await response.text()
                if response.status == 410:
                    raise WatchExpired(text)
                raise client.ApiException(status=response.status, reason=text)
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if not line.strip():
                    continue
                event = json.loads(line)
                kind_of_event = str(event.get("type", ""))
                obj = event.get("object") or {}
                if kind_of_event == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchExpired(str(obj.get("message", "")))
                    raise client.ApiException(
                        status=int(obj.get("code", 500)), reason=str(obj.get("message"))
                    )
                yield kind_of_event, obj
        finally:
            response.release()
