"""Pipelined publishing into LH_OBJECTS that never reorders one object's events.

The bus library's `Publisher` re-sends a message whose ack is overdue on its own. For the watcher
that can store an object's events out of order: when NATS restarts, the message that was on the
wire (k) is lost while the next one of the same object (k+1), buffered during the disconnect, is
stored after the reconnect; re-sending k then stores an older state after a newer one, and the last
message of the subject is no longer the object's current state.

So this publisher recovers differently. Messages go out with a bounded window of unacknowledged
ones. When one is known lost (a later one is acknowledged: JetStream answers in order), when no ack
at all arrived for `ack_timeout`, or when an ack reports an error, the whole unacknowledged window
is collapsed to the newest message per subject, leaving out subjects whose newer message is
already acknowledged, and those are re-sent in order, with the same `Nats-Msg-Id`, until stored.
An intermediate state of an object may be skipped in the history that way, but the newest one is
never overtaken by an older one, and nothing is ever given up while the process lives (the watch
behind it cannot be rewound, so dropping an event would lose it for good).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import OutboundBufferLimitError

from corral_bus import MSG_ID_HEADER, Bus
from corral_watcher.events import Message
from corral_watcher.wire import FastWire, frame

log = logging.getLogger("corral.watcher.publishing")

Headers = dict[str, str]


@dataclass(slots=True)
class _Pending:
    subject: str
    payload: bytes
    msg_id: str
    headers: Headers | None
    sent_at: float
    on_ack: Callable[[float], None] | None


def _all_headers(item: _Pending) -> Headers:
    headers = {MSG_ID_HEADER: item.msg_id}
    if item.headers:
        headers.update(item.headers)
    return headers


class OrderedPublisher:
    """Publishes with pipelined acks; per subject, stored order always equals publish order."""

    def __init__(self, bus: Bus, *, window: int = 8192, ack_timeout: float = 2.0) -> None:
        self._bus = bus
        self._window = window
        self._ack_timeout = ack_timeout
        self._pending: dict[int, _Pending] = {}
        # Newest acknowledged token per subject while anything is pending: an older pending
        # message of such a subject must never be re-sent.
        self._acked_upto: dict[str, int] = {}
        self._next = 0
        self._prefix = ""
        self._room = asyncio.Event()
        self._room.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._trouble = asyncio.Event()
        self._recovering = False
        # JetStream answers one connection's publishes to one stream in order: once a later token is
        # acknowledged, an earlier one still pending will never be.
        self._max_acked = 0
        self._last_ack_at = 0.0
        self._sub: Subscription | None = None
        self._wire: FastWire | None = None
        self._prefix_bytes = b""
        self._guard: asyncio.Task[None] | None = None
        self.acked = 0
        self.duplicates = 0
        self.recoveries = 0

    @property
    def bus(self) -> Bus:
        return self._bus

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def start(self, fast: bool = True) -> None:
        """Subscribe to the acks; `fast=False` keeps to nats-py's public API (slower)."""
        if self._sub is not None:
            return
        nc = self._bus.nc
        self._prefix = nc.new_inbox() + "."
        self._prefix_bytes = self._prefix.encode()
        self._sub = await nc.subscribe(self._prefix + "*", cb=self._on_ack_msg, pending_msgs_limit=0)
        if fast and FastWire.supported(nc):
            self._wire = FastWire(nc, self._sub._id, self._on_ack_raw)
            self._wire.install()
        self._guard = asyncio.create_task(self._watch_acks(), name="watcher-publisher-guard")

    async def publish(self, message: Message, on_ack: Callable[[float], None] | None = None) -> None:
        """Send one message; returns once it is written and the window has room for another.

        `on_ack(sent_at)` runs when the stream has stored it (for latency metrics).
        """
        await self.publish_batch([message], on_ack)

    async def publish_batch(
        self, messages: list[Message], on_last_ack: Callable[[float], None] | None = None
    ) -> None:
        """Send messages in order; `on_last_ack(sent_at)` runs when the last one is stored.

        The hot path of the watcher: one call per chunk of a watch stream, not per event.
        """
        if not messages:
            return
        wire = self._wire
        if wire is not None and wire.connected and not self._recovering:
            await self._publish_framed(wire, messages, on_last_ack)
            return
        pending = self._pending
        publish = self._bus.nc.publish
        prefix = self._prefix
        window = self._window
        last = len(messages) - 1
        now = time.monotonic()
        self._drained.clear()
        for i, (subject, payload, msg_id, headers) in enumerate(messages):
            if self._recovering or len(pending) >= window:
                await self._wait_for_room()
                now = time.monotonic()
            self._next += 1
            token = self._next
            item = _Pending(subject, payload, msg_id, headers, now, on_last_ack if i == last else None)
            pending[token] = item
            try:
                await publish(subject, payload, prefix + str(token), _all_headers(item))
            except OutboundBufferLimitError:
                await self._send(token, item)

    async def _publish_framed(
        self, wire: FastWire, messages: list[Message], on_last_ack: Callable[[float], None] | None
    ) -> None:
        pending = self._pending
        prefix = self._prefix_bytes
        window = self._window
        last = len(messages) - 1
        now = time.monotonic()
        frames: list[bytes] = []
        self._drained.clear()
        for i, (subject, payload, msg_id, headers) in enumerate(messages):
            if len(pending) >= window or self._recovering:
                # Out of room: what is framed must go out first, or no ack could ever make room.
                wire.write(frames)
                frames = []
                await wire.flush()
                await self._wait_for_room()
                now = time.monotonic()
            self._next += 1
            token = self._next
            pending[token] = _Pending(
                subject, payload, msg_id, headers, now, on_last_ack if i == last else None
            )
            frames.append(
                frame(subject.encode(), b"%b%d" % (prefix, token), msg_id.encode(), headers, payload)
            )
        wire.write(frames)
        await wire.flush()

    async def _wait_for_room(self) -> None:
        while self._recovering or len(self._pending) >= self._window:
            self._room.clear()
            await self._room.wait()

    async def _send(self, token: int, item: _Pending) -> None:
        while True:
            try:
                await self._bus.nc.publish(
                    item.subject, item.payload, self._prefix + str(token), _all_headers(item)
                )
                return
            except OutboundBufferLimitError:
                # Disconnected and the client's buffer is full: wait for the connection.
                await self._bus.connected.wait()

    async def _on_ack_msg(self, msg: Msg) -> None:
        no_responders = bool(msg.headers) and msg.headers.get("Status") == "503"  # type: ignore[union-attr]
        self._acked(msg.subject[len(self._prefix) :].encode(), msg.data, no_responders)

    def _on_ack_raw(self, subject: bytes, data: bytes, headers: bytes | None) -> None:
        no_responders = headers is not None and b" 503" in headers[:16]
        self._acked(subject[len(self._prefix_bytes) :], data, no_responders)

    def _acked(self, token_text: bytes, data: bytes, no_responders: bool) -> None:
        try:
            token = int(token_text)
        except ValueError:
            return
        item = self._pending.pop(token, None)
        if item is None:
            return  # the ack of a message collapsed away or already re-sent and stored
        if no_responders or not data or b'"error"' in data:
            # No stream answered (503 while JetStream restarts) or the stream refused: recover.
            self._pending[token] = item
            log.warning("publish to %s refused: %s", item.subject, data[:200] or "no responders")
            self._trouble.set()
            return
        if b'"duplicate"' in data:
            self.duplicates += 1
        self.acked += 1
        self._last_ack_at = time.monotonic()
        if token > self._max_acked:
            self._max_acked = token
        if self._pending:
            # Acks come in publish order, so this is the newest acknowledged token of the subject.
            self._acked_upto[item.subject] = token
            if len(self._pending) < self._window:
                self._room.set()
        else:
            self._acked_upto.clear()
            self._room.set()
            self._drained.set()
        if item.on_ack is not None:
            try:
                item.on_ack(item.sent_at)
            except Exception:
                # This runs inside nats-py's reading loop: an error here would cut the connection.
                log.exception("ack callback for %s failed", item.subject)

    async def _watch_acks(self) -> None:
        """Recover when the oldest message waited too long for its ack, or an ack was a refusal."""
        interval = min(0.25, max(0.02, self._ack_timeout / 4))
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._trouble.wait()
            try:
                if not self._pending:
                    self._trouble.clear()
                    continue
                if not self._bus.nc.is_connected:
                    await self._bus.connected.wait()
                    continue
                oldest_token, oldest = next(iter(self._pending.items()))
                # Lost: a later message is already acknowledged. Stalled: no ack at all for a while
                # (a restarted server forgot what was on the wire). A slow but moving stream is
                # neither, however long the window's oldest message has waited.
                lost = oldest_token < self._max_acked
                quiet = time.monotonic() - max(oldest.sent_at, self._last_ack_at)
                if self._trouble.is_set() or lost or quiet >= self._ack_timeout:
                    self._trouble.clear()
                    await self._recover()
                    # A stream that refuses at once (JetStream still starting) must not be hammered.
                    await asyncio.sleep(interval)
            except Exception:
                # This task is the only way lost messages get re-sent: it must outlive any failure.
                log.exception("recovering unacknowledged messages failed; retrying")
                await asyncio.sleep(interval)

    async def _recover(self) -> None:
        """Re-send the newest unacknowledged message of each subject, in the original order."""
        self.recoveries += 1
        newest: dict[str, int] = {}
        for token, item in self._pending.items():
            newest[item.subject] = token
        resend = [
            (token, self._pending[token])
            for token in sorted(newest.values())
            if self._acked_upto.get(self._pending[token].subject, 0) < token
        ]
        log.warning(
            "%d messages unacknowledged after %.1fs: re-sending the newest of %d objects",
            len(self._pending),
            self._ack_timeout,
            len(resend),
        )
        self._pending.clear()
        self._acked_upto.clear()
        # New publishes wait until the re-sends are written, or one could overtake them.
        self._recovering = True
        self._room.clear()
        try:
            now = time.monotonic()
            for _, item in resend:
                self._next += 1
                item.sent_at = now
                self._pending[self._next] = item
                await self._send(self._next, item)
        finally:
            self._recovering = False
            if len(self._pending) < self._window:
                self._room.set()
            if not self._pending:
                self._drained.set()

    async def flush(self) -> None:
        """Wait until everything published so far is stored."""
        await self._drained.wait()

    async def close(self) -> None:
        if self._wire is not None:
            self._wire.uninstall()
            self._wire = None
        if self._guard is not None:
            self._guard.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._guard
            self._guard = None
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
