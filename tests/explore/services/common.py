"""Small reads every service spec shares: a node's instance manager, the Events about an object,
the LH_OBJECTS subject of an object, the volumes as the API server holds them."""

from __future__ import annotations

from typing import Any

from corral_model.subjects import object_subject
from tests.fixtures.sandbox import Sandbox

Obj = dict[str, Any]
LONGHORN = "longhorn.io"


def status(obj: Obj | None) -> Obj:
    return (obj or {}).get("status") or {}


def instance_manager(sandbox: Sandbox, node: str, engine: str = "v1") -> str:
    """The name of `node`'s instance manager of `engine` ("" when it has none)."""
    for im in sandbox.emulator.list(LONGHORN, "instancemanagers", sandbox.namespace):
        if im["spec"].get("nodeID") == node and im["spec"].get("dataEngine") == engine:
            return str(im["metadata"]["name"])
    return ""


def volumes(sandbox: Sandbox) -> list[Obj]:
    return sandbox.emulator.list(LONGHORN, "volumes", sandbox.namespace)


def attached_on(sandbox: Sandbox, node: str, besides: tuple[str, ...] = ()) -> list[str]:
    """The volumes asked onto `node`, by name, other than `besides`."""
    return sorted(
        v["metadata"]["name"]
        for v in volumes(sandbox)
        if v["spec"].get("nodeID") == node and v["metadata"]["name"] not in besides
    )


def detached(sandbox: Sandbox, besides: tuple[str, ...] = ()) -> list[str]:
    return sorted(
        v["metadata"]["name"]
        for v in volumes(sandbox)
        if not v["spec"].get("nodeID") and v["metadata"]["name"] not in besides
    )


async def events_about(sandbox: Sandbox, name: str) -> list[str]:
    """The messages of the Events about object `name`, newest last."""
    answer = await sandbox.core.list_namespaced_event(sandbox.namespace)
    found = [e for e in answer.items if e.involved_object.name == name]
    found.sort(key=lambda e: str(e.last_timestamp or e.metadata.creation_timestamp or ""))
    return [str(e.message) for e in found]


def subject(kind: str, sandbox: Sandbox, name: str) -> str:
    return object_subject(kind, sandbox.namespace, name)
