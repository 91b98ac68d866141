"""Every command this service publishes to its command stream, whichever replica published it.

The stream (`LH_COMMANDS_<SERVICE>`, corral_model.subjects.command_stream) is a work queue for the
actuator: JetStream allows no second consumer on those subjects,
and a message is gone once the actuator acks it. So a replica follows the commands in two ways:

* live, through a core NATS subscription on `lh.cmd.<service>.>` (a JetStream publish is delivered
  to plain subscribers of its subject too): every command published while the replica is
  connected, including the ones the actuator has already taken;
* the backlog, by reading the messages still queued in the stream with the stream's batched
  direct get (corral_bus.batchget: 256 a round trip, `next_by_subj`, no consumer involved; one
  message get at a time where the stream does not allow direct gets): every command published
  before the subscription existed, or while the connection was down, that the actuator has not
  finished.

The subscription is made before the first scan, so between them nothing is missed; duplicates are
harmless (adoption is idempotent). The scan runs at start, after every reconnect, and whenever the
runner asks (a takeover). What neither can show, a command the actuator already finished while this
replica was not subscribed, is in LH_RESULTS (an `applied` result); see adoption.py and takeover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.errors import NotFoundError

from corral_bus import Bus
from corral_bus.batchget import DirectGetUnavailable, read_batches
from corral_model import codec
from corral_model.codec import SchemaError
from corral_model.envelopes import Command
from corral_model.subjects import COMMANDS_PREFIX, command_stream, escape_token
from corral_runtime.logs import Logger

OnCommand = Callable[[Command], None]


def commands_filter(service: str) -> str:
    return f"{COMMANDS_PREFIX}.{escape_token(service)}.>"


class CommandFeed:
    """Calls `on_command` for every command of `service` seen live or still queued (maybe twice)."""

    def __init__(self, bus: Bus, service: str, on_command: OnCommand, log: Logger, batch: int = 256) -> None:
        self.bus = bus
        self.batch = batch
        self.filter = commands_filter(service)
        self.stream = command_stream(service)
        self.on_command = on_command
        self.log = log
        self.scans = 0
        self.round_trips = 0
        """Requests the scans made: one per batch (one per command where direct gets are off)."""
        self._subscription: Subscription | None = None
        self._scanned_at_reconnects = -1

    async def start(self) -> None:
        """Subscribe (before any scan, so nothing falls between the two)."""
        if self._subscription is None:
            self._subscription = await self.bus.nc.subscribe(self.filter, cb=self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        self._handle(msg.subject, msg.data)

    def _handle(self, subject: str, data: bytes | None) -> None:
        try:
            command = codec.decode(data or b"", Command)
        except SchemaError as e:
            # The actuator dead-letters it; here it only cannot count.
            self.log.warning("skipping an unreadable command", subject=subject, error=str(e))
            return
        self.on_command(command)

    async def scan(self) -> int:
        """Hand out every command of the service still queued in its stream; returns how many."""
        reconnects = self.bus.reconnects
        count = 0
        try:
            async for batch in read_batches(self.bus, self.stream, self.filter, batch=self.batch):
                self.round_trips += 1
                for message in batch:
                    self._handle(message.subject, message.data)
                count += len(batch)
        except DirectGetUnavailable:
            count = await self._scan_one_by_one()
        self.scans += 1
        self._scanned_at_reconnects = reconnects
        return count

    async def _scan_one_by_one(self) -> int:
        """The scan where the stream allows no direct get: one message-get request per command."""
        seq, count = 1, 0
        while True:
            try:
                message = await self.bus.js.get_msg(self.stream, seq=seq, subject=self.filter, next=True)
            except NotFoundError:
                break  # past the last one
            assert message.seq is not None
            self.round_trips += 1
            self._handle(message.subject or "", message.data)
            seq, count = message.seq + 1, count + 1
        return count

    async def run(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        """Scan once, then again after every reconnect (the subscription missed what was published
        while disconnected). Errors are logged and retried: counting is best done late, never not."""
        while not stop.is_set():
            if self._scanned_at_reconnects != self.bus.reconnects and self.bus.is_connected:
                try:
                    await self.scan()
                except Exception as e:
                    self.log.warning("scanning queued commands failed; retrying", error=str(e))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)

    async def close(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()


async def stream_end(bus: Bus, stream: str, filters: list[str]) -> int:
    """The sequence of the newest message in `stream` matching any of `filters` (0: none)."""
    end = 0
    for subject in filters:
        try:
            message = await bus.js.get_last_msg(stream, subject)
        except NotFoundError:
            continue
        end = max(end, message.seq or 0)
    return end
