"""A cluster snapshot (a Kubernetes `List`, as `kubectl get … -o json` prints it) as ObjectEvents.

`corral plan` and the snapshot tests feed the very same decider the service runs, through the very
same events it would get from the bus: one ADDED per object, then a RESYNCED per kind it reads, so the view
is complete and the decider bootstraps exactly as it does after a relist. An object that does not
decode becomes what the watcher would publish for it, an UNREADABLE marker, so a volume among them
is explained as `unreadable` (corral_model.snapshot reads the document).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from corral_model.envelopes import EventType, ObjectEvent
from corral_model.snapshot import SnapshotError, read_items

__all__ = ["SnapshotError", "snapshot_events"]


def snapshot_events(
    document: Mapping[str, Any], kinds: Iterable[str], namespace: str = "longhorn-system"
) -> list[ObjectEvent[Any]]:
    """Events for every object in `document`, then RESYNCED for every kind token in `kinds`.
    Raises SnapshotError for a document that cannot be read as a whole."""
    read = read_items(document)
    events: list[ObjectEvent[Any]] = []
    for info, obj in read.objects:
        meta = obj.metadata
        events.append(
            ObjectEvent(
                type=EventType.ADDED,
                kind=info.token,
                namespace=meta.namespace or namespace,
                name=meta.name,
                uid=meta.uid,
                resource_version=meta.resource_version,
                object=obj,
            )
        )
    for bad in read.undecodable:
        events.append(
            ObjectEvent(
                type=EventType.UNREADABLE,
                kind=bad.token,
                namespace=bad.namespace or namespace,
                name=bad.name,
                uid=bad.uid,
                resource_version=bad.resource_version,
                reason=bad.reason,
            )
        )
    for token in sorted(kinds):
        events.append(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=namespace, name=""))
    return events
