"""What an earlier watcher (or the other replica) already published: the starting point of a new one.

Without it, a watcher that restarts knows nothing of what consumers hold: its first list would
republish every object, and, worse, an object deleted while no watcher ran would never get its
tombstone, so every consumer would keep it forever. Seeding the published view with the last event
per object from LH_OBJECTS makes the first list publish exactly what changed meanwhile, DELETED for
what vanished included.

The same read tells the publisher the stream sequence of each subject's last message, which its
first event of each object must expect (corral_watcher.publishing).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from corral_bus import Bus
from corral_bus.bootstrap import BootstrapReader, StreamMessage, follow
from corral_model.codec import SchemaError
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.kinds import KindInfo
from corral_model.subjects import OBJECTS_PREFIX, escape_token

log = logging.getLogger("corral.watcher.bootstrap")
_CLEANUP_S = 2.0


async def last_published(
    bus: Bus, kind: KindInfo, namespace: str, sequences: dict[str, int] | None = None
) -> dict[str, Any]:
    """Name → object of the last event per object of `kind` in `namespace` (tombstones left out).
    `sequences`, when given, receives subject → stream sequence of every subject's last message
    (tombstones and markers included)."""
    event_type = ObjectEvent[kind.struct]  # type: ignore[name-defined]
    objects: dict[str, Any] = {}
    complete = asyncio.Event()

    async def on_message(message: StreamMessage) -> None:
        if not message.bootstrap:
            return
        if sequences is not None:
            sequences[message.subject] = message.stream_seq
        try:
            event = message.decode(event_type)
        except SchemaError as e:
            log.warning("ignoring unreadable event on %s: %s", message.subject, e)
            return
        if event.type is EventType.DELETED:
            objects.pop(event.name, None)
        elif event.type is not EventType.RESYNCED and event.object is not None:
            objects[event.name] = event.object

    async def on_bootstrapped() -> None:
        complete.set()

    reader = BootstrapReader(bus, [f"{OBJECTS_PREFIX}.{kind.token}.{escape_token(namespace)}.*"])
    reading = asyncio.create_task(follow(reader, on_message, on_bootstrapped))
    waiting = asyncio.create_task(complete.wait())
    try:
        await asyncio.wait({reading, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if not complete.is_set():
            reading.result()  # the reader ended without a snapshot: raise what it raised
            raise RuntimeError(f"bootstrap of {kind.token} ended before its snapshot")
    finally:
        for task in (reading, waiting):
            task.cancel()
        # Bounded: a reader stuck in a pull that ignores cancellation must not keep the watcher from
        # listing; it is abandoned (and its ephemeral consumer expires on the server by itself).
        await asyncio.wait({reading, waiting}, timeout=_CLEANUP_S)
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_CLEANUP_S):
                await reader.close()
    return objects
