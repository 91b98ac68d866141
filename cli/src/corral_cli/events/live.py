"""Following corral's streams as messages arrive, read-only, for `corral events tail` and
`corral events dump --follow`.

LH_OBJECTS and LH_RESULTS (limits streams) are followed through ephemeral unacknowledged consumers
(reader.py). LH_COMMANDS is the actuator's work queue: no second consumer may read it, and what the
actuator takes is gone, so commands are recorded as they are published, through a core NATS
subscription on their subjects (a JetStream publish reaches plain subscribers too), as
corral_decision.command_feed does. Such a line has no stream sequence (0) and the time it arrived.
The subscription is made first (`start`), so a snapshot read afterwards misses nothing in between;
a command seen both ways is given once (by its Nats-Msg-Id, the command id).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from corral_bus import MSG_ID_HEADER, Bus
from corral_cli.events.reader import consume
from corral_decision.bundle import BundleEntry, entry
from corral_model.subjects import COMMANDS_STREAM


class LiveFeed:
    """Bundle entries of the given streams (`filters_by_stream`) in arrival order."""

    def __init__(self, bus: Bus, filters: Mapping[str, Sequence[str]]) -> None:
        self.bus = bus
        self.filters = filters
        self.seen_commands: set[str] = set()
        """Ids of commands already given (by a snapshot, or earlier here)."""
        self._queue: asyncio.Queue[BundleEntry] = asyncio.Queue()
        self._subscriptions: list[Subscription] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Subscribe to the commands now, before any snapshot of LH_COMMANDS is read."""
        for subject in self.filters.get(COMMANDS_STREAM, ()):
            self._subscriptions.append(await self.bus.nc.subscribe(subject, cb=self._on_command))

    async def _on_command(self, msg: Msg) -> None:
        self._queue.put_nowait(entry(COMMANDS_STREAM, 0, time.time_ns(), msg.subject, msg.headers, msg.data))

    async def follow(self, after: Mapping[str, int] | None = None) -> None:
        """Follow the limits streams from the sequence after `after[stream]` (default: new messages
        only); returns once every follower's consumer exists."""
        ready: list[asyncio.Event] = []
        for stream, subjects in self.filters.items():
            if stream != COMMANDS_STREAM:
                start = after.get(stream) if after is not None else None
                ready.append(asyncio.Event())
                self._tasks.append(asyncio.create_task(self._pump(stream, subjects, start, ready[-1])))
        while not all(event.is_set() for event in ready):
            self._raise_failed()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in ready)), 0.2)

    async def _pump(
        self, stream: str, subjects: Sequence[str], last: int | None, ready: asyncio.Event
    ) -> None:
        if last is None:
            feed = consume(self.bus, stream, subjects, new=True, follow=True, on_ready=ready.set)
        else:
            feed = consume(self.bus, stream, subjects, start_seq=last + 1, follow=True, on_ready=ready.set)
        async for _, record in feed:
            self._queue.put_nowait(record)

    def _raise_failed(self) -> None:
        for task in self._tasks:
            if task.done():
                task.result()  # a follower that stopped: raise what stopped it

    async def entries(self, stop: asyncio.Event) -> AsyncIterator[BundleEntry]:
        """Every entry as it arrives until `stop` is set (or a follower failed: its error is raised)."""
        while not stop.is_set():
            self._raise_failed()
            with contextlib.suppress(TimeoutError):
                record = await asyncio.wait_for(self._queue.get(), 0.2)
                if record.stream == COMMANDS_STREAM:
                    msg_id = record.headers.get(MSG_ID_HEADER, "")
                    if msg_id in self.seen_commands:
                        continue
                    if msg_id:
                        self.seen_commands.add(msg_id)
                yield record

    async def close(self) -> None:
        for subscription in self._subscriptions:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
