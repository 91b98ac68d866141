"""A cluster snapshot (a Kubernetes `List`, as `kubectl get … -o json` prints it) as ObjectEvents.

`corral plan` and the snapshot tests feed the very same decider the service runs, through the very
same events it would get from the bus: one ADDED per object, then a RESYNCED per kind it reads, so
the view is complete and the decider bootstraps exactly as it does after a relist.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from corral_model.envelopes import EventType, ObjectEvent
from corral_model.kinds import KINDS, LONGHORN_GROUP


class SnapshotError(ValueError):
    """The document is not a Kubernetes List (or a single object) this service can read."""


def _token(item: Mapping[str, Any]) -> str | None:
    kind = item.get("kind")
    if not isinstance(kind, str):
        raise SnapshotError(f"an item has no kind: {str(item)[:120]}")
    api_version = item.get("apiVersion")
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else LONGHORN_GROUP
    for info in KINDS.values():
        if info.kind == kind and info.group == group:
            return info.token
    return None  # a kind corral does not model: not ours to judge


def snapshot_events(
    document: Mapping[str, Any], kinds: Iterable[str], namespace: str = "longhorn-system"
) -> list[ObjectEvent[Any]]:
    """Events for every object in `document`, then RESYNCED for every kind token in `kinds`."""
    is_list = str(document.get("kind", "List")).endswith("List")
    items: Sequence[Any] = document.get("items", []) if is_list else [document]
    if not isinstance(items, list):
        raise SnapshotError("`items` is not a list")
    events: list[ObjectEvent[Any]] = []
    for item in items:
        if not isinstance(item, Mapping):
            raise SnapshotError(f"an item is not an object: {str(item)[:120]}")
        token = _token(item)
        if token is None:
            continue
        try:
            obj = msgspec.convert(item, KINDS[token].struct)
        except msgspec.ValidationError as e:
            raise SnapshotError(f"{item.get('kind')} {item.get('metadata', {}).get('name')}: {e}") from e
        meta = obj.metadata
        events.append(
            ObjectEvent(
                type=EventType.ADDED,
                kind=token,
                namespace=meta.namespace or namespace,
                name=meta.name,
                uid=meta.uid,
                resource_version=meta.resource_version,
                object=obj,
            )
        )
    for token in sorted(kinds):
        events.append(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=namespace, name=""))
    return events
