"""Shared by the emulator conformance tests: object builders and a bounded watch collector."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client, watch

NS = "longhorn-system"
LH = ("longhorn.io", "v1beta2")
MERGE = "application/merge-patch+json"


def volume(
    name: str, *, image: str = "img-a", labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Volume",
        "metadata": {"name": name, "namespace": NS, "labels": labels or {}},
        "spec": {"image": image, "numberOfReplicas": 3, **spec},
    }


def crs(api: client.ApiClient) -> Any:
    """CustomObjectsApi, typed loosely: its stubs omit the `_content_type` / `_continue` keywords."""
    return client.CustomObjectsApi(api)


async def create_volume(api: client.ApiClient, name: str, **kw: Any) -> dict[str, Any]:
    result: dict[str, Any] = await crs(api).create_namespaced_custom_object(
        *LH, NS, "volumes", volume(name, **kw)
    )
    return result


async def patch_volume(api: client.ApiClient, name: str, body: Any, **kw: Any) -> dict[str, Any]:
    kw.setdefault("_content_type", MERGE if isinstance(body, dict) else "application/json-patch+json")
    result: dict[str, Any] = await crs(api).patch_namespaced_custom_object(
        *LH, NS, "volumes", name, body, **kw
    )
    return result


async def collect(
    func: Callable[..., Any],
    *args: Any,
    until: Callable[[list[dict[str, Any]]], bool],
    deadline_s: float = 10.0,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Watch through kubernetes-asyncio until `until(events)` holds; fail after the deadline."""
    events: list[dict[str, Any]] = []
    w = watch.Watch()
    try:
        async with asyncio.timeout(deadline_s):
            async for event in w.stream(func, *args, **kwargs):
                events.append(event)
                if until(events):
                    break
    finally:
        await w.close()
    return events


def rvs(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events]


def summary(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in events]
