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

from corral_bus import tombstone_headers
from corral_model.envelopes import EventType, ObjectEvent, event_id
from corral_model.subjects import object_subject, resync_subject

_encoder = msgspec.json.Encoder()

Message = tuple[str, bytes, str, dict[str, str] | None]
"""(subject, payload, Nats-Msg-Id, further headers or None): what OrderedPublisher sends."""


class EventEncoder:
    """Encodes the events of one kind (its bus token) into bus messages."""

    __slots__ = ("_subjects", "_tombstone", "kind")

    def __init__(self, kind: str, tombstone_ttl: float) -> None:
        self.kind = kind
        self._tombstone = tombstone_headers(tombstone_ttl)
        # Escaping a name into a subject costs more than the rest of the message: once per object.
        self._subjects: dict[tuple[str, str], str] = {}

    def subject(self, namespace: str, name: str) -> str:
        key = (namespace, name)
        subject = self._subjects.get(key)
        if subject is None:
            subject = self._subjects[key] = object_subject(self.kind, namespace, name)
        return subject

    def forget(self, namespace: str, name: str) -> None:
        """Drop a deleted object's cached subject (the cache must not grow with every object ever)."""
        self._subjects.pop((namespace, name), None)

    def object_message(
        self, type_: EventType, obj: Any, observed_at: float, resource_version: str | None = None
    ) -> Message:
        """The message for one object event; `resource_version` overrides the object's own (a
        tombstone synthesized from a list carries the list's version)."""
        meta = obj.metadata
        rv = meta.resource_version if resource_version is None else resource_version
        # ObjectEvent, not ObjectEvent[Any]: calling the parametrized alias goes through typing.
        event: ObjectEvent[Any] = ObjectEvent(
            type=type_,
            kind=self.kind,
            namespace=meta.namespace,
            name=meta.name,
            uid=meta.uid,
            resource_version=rv,
            observed_at=observed_at,
            object=obj,
        )
        subject = self._subjects.get((meta.namespace, meta.name)) or self.subject(meta.namespace, meta.name)
        if type_ is EventType.DELETED:
            self.forget(meta.namespace, meta.name)
            return subject, _encoder.encode(event), f"{self.kind}:{meta.uid}:{rv}:deleted", self._tombstone
        # corral_model.envelopes.event_id, inlined: this runs for every event.
        return subject, _encoder.encode(event), f"{self.kind}:{meta.uid}:{rv}", None

    def unreadable_message(
        self, namespace: str, name: str, uid: str, resource_version: str, reason: str, observed_at: float
    ) -> Message:
        """The marker for an object that exists at `resource_version` but does not decode."""
        event: ObjectEvent[Any] = ObjectEvent(
            type=EventType.UNREADABLE,
            kind=self.kind,
            namespace=namespace,
            name=name,
            uid=uid,
            resource_version=resource_version,
            observed_at=observed_at,
            reason=reason,
        )
        msg_id = event_id(EventType.UNREADABLE, self.kind, namespace, name, uid, resource_version)
        return self.subject(namespace, name), _encoder.encode(event), msg_id, None

    def resynced_message(self, namespace: str, resource_version: str) -> Message:
        """The marker after a (re)list: consumers' view of this kind is now complete."""
        event: ObjectEvent[Any] = ObjectEvent(
            type=EventType.RESYNCED,
            kind=self.kind,
            namespace=namespace,
            name="",
            resource_version=resource_version,
            observed_at=time.time(),
        )
        msg_id = event_id(EventType.RESYNCED, self.kind, namespace, "", "", resource_version)
        return resync_subject(self.kind, namespace), _encoder.encode(event), msg_id, None
