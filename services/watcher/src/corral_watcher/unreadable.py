"""Objects that exist but do not decode: parked in LH_DEAD, and announced on their own subject.

One bad object (a field of a type corral does not expect, an exporter's or an API server's bug)
must neither block its kind nor vanish. Every other object of the kind goes on being published;
the bad one gets, once per resourceVersion:

* a dead letter in LH_DEAD (`lh.dead.lh_objects.undecodable`) with its kind, namespace, name,
  resourceVersion, the decoder's message and the object as the API server sent it, so an operator
  can see what is wrong; its `Nats-Msg-Id` is kind + uid + resourceVersion, so two watchers, or
  every periodic re-list, store it once;
* an UNREADABLE ObjectEvent (no object, the reason) on the object's own LH_OBJECTS subject, so a
  decision service learns that what it holds for that object is no longer current, and, since it
  is the subject's last message, so does one that bootstraps later.

It is logged once per object (not once per version: Longhorn rewrites a volume's status every few
seconds), and counted per dead letter in `corral_watcher_undecodable_lines`.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import msgspec

from corral_bus import Bus
from corral_bus.deadletter import DeadReason, dead_letter, publish_dead_letter
from corral_kube.decoding import Rejected, UndecodableLine
from corral_model import longhorn as lh
from corral_model.envelopes import DeadLetter
from corral_model.kinds import KindInfo
from corral_model.subjects import OBJECTS_STREAM
from corral_watcher.events import EventEncoder, Message
from corral_watcher.metrics import KindMetrics

log = logging.getLogger("corral.watcher")

CONSUMER = "watcher"


class Unreadable(msgspec.Struct, frozen=True, gc=False):
    """One object (version) that did not decode; `name` is "" when not even that was readable."""

    name: str
    namespace: str
    uid: str
    resource_version: str
    reason: str
    raw: bytes
    watch_type: str = ""
    """ADDED / MODIFIED / DELETED for a watch line, "" for a listed object."""

    @classmethod
    def listed(cls, rejected: Rejected) -> Unreadable:
        return cls(
            name=rejected.name,
            namespace=rejected.namespace,
            uid=rejected.uid,
            resource_version=rejected.resource_version,
            reason=rejected.error,
            raw=rejected.raw,
        )

    @classmethod
    def watched(cls, line: UndecodableLine) -> Unreadable:
        return cls(
            name=line.name,
            namespace=line.namespace,
            uid=line.uid,
            resource_version=line.resource_version,
            reason=line.error,
            raw=line.object or line.line,
            watch_type=line.type,
        )


class UnreadableObjects:
    """The unreadable objects of one kind: what to publish for each, and what was already done."""

    def __init__(
        self, kind: KindInfo, namespace: str, bus: Bus, encoder: EventEncoder, metrics: KindMetrics
    ) -> None:
        self.kind = kind
        self.namespace = namespace
        self._bus = bus
        self._encoder = encoder
        self._metrics = metrics
        self.current: dict[str, Unreadable] = {}
        """Name → the newest unreadable version of each object that is unreadable now."""
        self._queued: list[tuple[str, DeadLetter]] = []
        # Name (or, for an object without one, the dedup id) → dedup id of the last dead letter
        # queued for it: a re-list that finds the same version again does not report it again.
        self._parked: dict[str, str] = {}

    def placeholder(self, item: Unreadable) -> Any:
        """A slim object holding only the metadata: what the published view keeps for an object
        it never could read, so that its disappearance still yields a tombstone."""
        return self.kind.struct(
            metadata=lh.ObjectMeta(
                name=item.name,
                namespace=item.namespace or self.namespace,
                uid=item.uid,
                resource_version=item.resource_version,
            )
        )

    @property
    def queued(self) -> bool:
        return bool(self._queued)

    def report(self, item: Unreadable, observed_at: float) -> Message | None:
        """Queue the dead letter and return the UNREADABLE marker to publish on the object's
        subject, once per version: None for a version already reported (a re-list finds it again),
        and for an object without a name (it has no subject)."""
        if item.uid and item.resource_version:
            msg_id = f"dead:{self.kind.token}:{item.uid}:{item.resource_version}"
        else:
            msg_id = f"dead:{self.kind.token}:sha256:{hashlib.sha256(item.raw).hexdigest()[:32]}"
        key = item.name or msg_id
        if self._parked.get(key) == msg_id:
            return None
        self._parked[key] = msg_id
        self._queued.append((msg_id, self._letter(item)))
        self._metrics.undecodable.inc()
        if not item.name or item.name not in self.current:
            log.error(
                "%s %s/%s at resourceVersion %s does not decode (parked in LH_DEAD): %s",
                self.kind.token,
                item.namespace or self.namespace,
                item.name or "?",
                item.resource_version or "?",
                item.reason[:500],
            )
        if not item.name:
            return None
        self.current[item.name] = item
        self._metrics.unreadable_objects.set(len(self.current))
        self._metrics.unreadable.inc()
        return self._encoder.unreadable_message(
            item.namespace or self.namespace,
            item.name,
            item.uid,
            item.resource_version,
            item.reason,
            observed_at,
        )

    def readable(self, name: str) -> None:
        """`name` decoded again, or is gone: it is no longer unreadable."""
        self._parked.pop(name, None)
        if self.current.pop(name, None) is not None:
            self._metrics.unreadable_objects.set(len(self.current))
            log.info("%s %s/%s decodes again, or is gone", self.kind.token, self.namespace, name)

    def _letter(self, item: Unreadable) -> DeadLetter:
        namespace = item.namespace or self.namespace
        letter = dead_letter(
            reason_class=DeadReason.UNDECODABLE,
            reason=item.reason,
            stream=OBJECTS_STREAM,
            subject=self._encoder.subject(namespace, item.name) if item.name else "",
            consumer=CONSUMER,
            deliveries=0,
            headers=None,
            data=item.raw,
        )
        return msgspec.structs.replace(
            letter,
            kind=self.kind.kind,
            namespace=namespace,
            name=item.name,
            resource_version=item.resource_version,
        )

    async def flush(self) -> None:
        """Store the queued dead letters in LH_DEAD. One that cannot be stored now is logged and
        forgotten: the next re-list finds the object again and queues it anew."""
        queued, self._queued = self._queued, []
        for msg_id, letter in queued:
            try:
                await publish_dead_letter(self._bus.js, letter, DeadReason.UNDECODABLE, 0, msg_id=msg_id)
            except Exception as e:  # NATS down, LH_DEAD missing: never let it stop the kind's loop
                key = letter.name or msg_id
                if self._parked.get(key) == msg_id:
                    del self._parked[key]
                log.warning(
                    "could not park %s %s/%s in LH_DEAD (retried at the next list): %s: %s",
                    letter.kind,
                    letter.namespace,
                    letter.name or "?",
                    type(e).__name__,
                    e,
                )
