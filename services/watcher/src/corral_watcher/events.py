"""Turning an observed object into the message LH_OBJECTS stores: subject, payload, headers.

The subject is per object (`lh.obj.<kind>.<ns>.<name>`), the `Nats-Msg-Id` is the event id (kind +
uid + resourceVersion), so the same change published twice (a restarted watcher, or two replicas)
is stored once. A DELETED event is a tombstone: it rolls the object's history up and expires after
the tombstone TTL (`corral_bus.tombstone_headers`).
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from corral_bus import MSG_ID_HEADER, tombstone_headers
from corral_model.envelopes import EventType, ObjectEvent, event_id
from corral_model.subjects import object_subject, resync_subject

_encoder = msgspec.json.Encoder()

Message = tuple[str, bytes, dict[str, str]]


class EventEncoder:
    """Encodes the events of one kind (its bus token) into bus messages."""

    __slots__ = ("_tombstone", "kind")

    def __init__(self, kind: str, tombstone_ttl: float) -> None:
        self.kind = kind
        self._tombstone = tombstone_headers(tombstone_ttl)

    def object_message(
        self, type_: EventType, obj: Any, observed_at: float, resource_version: str | None = None
    ) -> Message:
        """The message for one object event; `resource_version` overrides the object's own (a
        tombstone synthesized from a list carries the list's version)."""
        meta = obj.metadata
        rv = meta.resource_version if resource_version is None else resource_version
        event = ObjectEvent[Any](
            type=type_,
            kind=self.kind,
            namespace=meta.namespace,
            name=meta.name,
            uid=meta.uid,
            resource_version=rv,
            observed_at=observed_at,
            object=obj,
        )
        msg_id = event_id(type_, self.kind, meta.namespace, meta.name, meta.uid, rv)
        if type_ is EventType.DELETED:
            headers = {**self._tombstone, MSG_ID_HEADER: msg_id}
        else:
            headers = {MSG_ID_HEADER: msg_id}
        return object_subject(self.kind, meta.namespace, meta.name), _encoder.encode(event), headers

    def resynced_message(self, namespace: str, resource_version: str) -> Message:
        """The marker after a (re)list: consumers' view of this kind is now complete."""
        event = ObjectEvent[Any](
            type=EventType.RESYNCED,
            kind=self.kind,
            namespace=namespace,
            name="",
            resource_version=resource_version,
            observed_at=time.time(),
        )
        msg_id = event_id(EventType.RESYNCED, self.kind, namespace, "", "", resource_version)
        return resync_subject(self.kind, namespace), _encoder.encode(event), {MSG_ID_HEADER: msg_id}
