"""Noticing, without waiting for the object's next change, that LH_OBJECTS claims a state the
watcher never published.

Anyone holding the watcher's NATS credentials can store an event for a real object claiming a
newer resourceVersion than the watcher has seen (a standby DR volume made active, a concurrency
limit raised). The publisher replaces such a message when it next writes that object's subject
(corral_watcher.conflicts), but an object that does not change would keep the forgery, and every
decision service would act on it. So the watcher follows what LH_OBJECTS stores for its kinds:
a message whose resourceVersion is ahead of what the watcher last published for that object is
checked again after `grace` (another watcher replica runs a few milliseconds ahead, and this one's
watch then catches up: nothing to do). If the stream still holds a state newer than the watcher
knows, the watcher publishes the object as it knows it again; that write meets the foreign message
as a conflict, and the API server settles it: a state it never had is replaced by its object and
reported, a real one (this replica's watch lagging) supersedes the re-publication.

Cost: one small decode per stored message, an ephemeral consumer's snapshot at start (skipped: the
first list already replaces what the stream holds wrongly), and a stream read per suspect.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

import msgspec

from corral_bus import Bus
from corral_bus.bootstrap import BootstrapReader, StreamMessage
from corral_model.envelopes import EventType
from corral_model.subjects import OBJECTS_PREFIX, escape_token
from corral_watcher.conflicts import resource_version
from corral_watcher.kindwatch import KindWatcher
from corral_watcher.publishing import OrderedPublisher

log = logging.getLogger("corral.watcher.guard")

_RESTART_S = 1.0


class _Head(msgspec.Struct, rename="camel"):
    type: str = ""
    kind: str = ""
    name: str = ""
    resource_version: str = ""


_head = msgspec.json.Decoder(_Head)
_SKIPPED = frozenset({EventType.RESYNCED.value, EventType.UNREADABLE.value})


class StreamGuard:
    """Follows LH_OBJECTS for the watcher's kinds and re-publishes what a foreign message overtook."""

    def __init__(
        self,
        bus: Bus,
        kinds: Mapping[str, KindWatcher],
        publisher: OrderedPublisher,
        *,
        grace: float = 2.0,
    ) -> None:
        self._bus = bus
        self._kinds = kinds
        self._publisher = publisher
        self._grace = grace
        self._suspects: dict[str, tuple[int, int]] = {}
        """Subject → (stream sequence, resourceVersion) of the newest message ahead of the view."""
        self._checks: set[asyncio.Task[None]] = set()
        self.suspected = 0
        self.restored = 0

    async def run(self) -> None:
        """Follow the stream until cancelled; a reader that fails is started again."""
        filters = [
            f"{OBJECTS_PREFIX}.{token}.{escape_token(kind.namespace)}.*"
            for token, kind in self._kinds.items()
        ]
        try:
            while True:
                reader = BootstrapReader(self._bus, filters)
                try:
                    async for message in reader:
                        if not message.bootstrap:
                            self.inspect(message)
                except Exception as e:
                    log.warning("following LH_OBJECTS failed: %s: %s; starting again", type(e).__name__, e)
                finally:
                    with contextlib.suppress(Exception):
                        await reader.close()
                await asyncio.sleep(_RESTART_S)
        finally:
            for task in self._checks:
                task.cancel()

    def inspect(self, message: StreamMessage) -> None:
        """Note a stored message that is ahead of what the watcher published for its object."""
        try:
            head = _head.decode(message.data)
        except Exception:  # bad bytes are not a state: consumers skip them
            return
        if head.type in _SKIPPED or not head.resource_version.isdigit():
            return
        kind = self._kinds.get(head.kind)
        if kind is None or kind.encoder.subject(kind.namespace, head.name) != message.subject:
            return
        known = kind.view.objects.get(head.name)
        if known is None or head.name in kind.unreadable.current:
            return  # not an object the watcher holds a state of (see the report: not yet covered)
        stored = int(head.resource_version)
        if stored <= _version(known.metadata.resource_version):
            return
        self.suspected += 1
        previous = self._suspects.get(message.subject)
        self._suspects[message.subject] = (message.stream_seq, stored)
        if previous is None:
            task = asyncio.create_task(self._check_later(kind, head.name, message.subject))
            self._checks.add(task)
            task.add_done_callback(self._checks.discard)

    async def _check_later(self, kind: KindWatcher, name: str, subject: str) -> None:
        await asyncio.sleep(self._grace)
        try:
            await self._check(kind, name, subject)
        except Exception:
            log.exception("checking %s against the watcher's view failed", subject)

    async def _check(self, kind: KindWatcher, name: str, subject: str) -> None:
        seq, stored = self._suspects.pop(subject, (0, 0))
        known = kind.view.objects.get(name)
        if known is None or _version(known.metadata.resource_version) >= stored:
            return  # this watcher caught up (another replica was ahead), or the object is gone
        try:
            last = await self._publisher.last_message(subject)
        except Exception as e:
            log.warning("reading the last message of %s failed: %s", subject, e)
            last = None
        if last is None or (resource_version(last.data) or 0) <= _version(known.metadata.resource_version):
            return  # replaced meanwhile
        # Under an id of its own: the same state may have been stored within the dedup window.
        subject_, payload, msg_id, headers = kind.encoder.object_message(
            EventType.MODIFIED, known, time.time()
        )
        log.warning(
            "%s: LH_OBJECTS holds resourceVersion %d (seq %d), ahead of the watcher's %s: publishing the"
            " object again for the API server to judge",
            subject,
            stored,
            seq,
            known.metadata.resource_version,
        )
        self.restored += 1
        await self._publisher.publish((subject_, payload, f"{msg_id}:restore.{last.seq}", headers))


def _version(text: str) -> int:
    return int(text) if text.isdigit() else 0
