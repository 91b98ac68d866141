"""Publishing into JetStream with pipelined acknowledgements.

Waiting for each ack before sending the next message caps a Python publisher at a few thousand
messages a second; sending without waiting for acks at all floods the server and loses messages
without anyone noticing. The `Publisher` keeps a bounded window of messages in flight: `publish`
returns as soon as the message is written while the window has room, and waits for acks once it is
full. Every ack is checked; a missing ack is re-sent with the same `Nats-Msg-Id` (so the stream
stores it once) until `give_up_after`; what still failed is raised by `flush`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import OutboundBufferLimitError
from opentelemetry.trace import get_current_span

from corral_bus import framing
from corral_bus.connection import Bus
from corral_bus.errors import PublishError, PublishFailure
from corral_bus.streams import MSG_ID_HEADER, TTL_HEADER
from corral_bus.tracing import inject_trace

log = logging.getLogger("corral.bus.publisher")


class _ApiError(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class _PubAck(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: _ApiError | None = None


_ack_decoder = msgspec.json.Decoder(_PubAck)


@dataclass(slots=True)
class _InFlight:
    subject: str
    payload: bytes
    headers: dict[str, str] | None
    msg_id: str
    first_sent: float
    deadline: float
    frame: bytes | None
    """The whole protocol frame (fast path), kept for re-sending."""
    retries: int = 0
    last_error: str = ""
    last_sent: float = 0.0


class Publisher:
    """Pipelined, acknowledged, deduplicated publishing into JetStream.

    `await publish(...)` is fast while fewer than `window` messages await their ack;
    `await flush()` waits until every message sent so far is acknowledged and raises `PublishError`
    listing those that were not. A duplicate ack (the stream already had that `Nats-Msg-Id`) is a
    success. Safe to share between tasks of one event loop.

    Order: messages are stored in publish order unless one has to be re-sent (its ack was lost in
    a reconnect, or JetStream answered "unavailable"); a re-sent message can then land after later
    ones, of its own subject too. Where the newest message per subject must be the object's current
    state (the watcher into LH_OBJECTS), use a publisher that collapses re-sends to the newest per
    subject instead (corral_watcher.publishing.OrderedPublisher).
    """

    def __init__(
        self,
        bus: Bus,
        *,
        window: int = 1024,
        ack_timeout: float = 2.0,
        give_up_after: float = 30.0,
        trace: bool = True,
    ) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self._bus = bus
        self._window = window
        self._ack_timeout = ack_timeout
        self._give_up_after = give_up_after
        self._trace = trace
        self._in_flight: dict[str, _InFlight] = {}
        self._failures: list[PublishFailure] = []
        self._room = asyncio.Event()
        self._room.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._sub: Subscription | None = None
        self._prefix = ""
        self._next = 0
        self._reaper: asyncio.Task[None] | None = None
        self._starting: asyncio.Lock = asyncio.Lock()
        self._fast = framing.fast_path(bus.nc)
        self._seen_reconnects = bus.reconnects
        self.published = 0
        self.duplicates = 0

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def _start(self) -> None:
        async with self._starting:
            if self._sub is not None:
                return
            nc = self._bus.nc
            self._prefix = f"{nc.new_inbox()}."
            self._sub = await nc.subscribe(f"{self._prefix}*", cb=self._on_ack, pending_msgs_limit=0)
            self._reaper = asyncio.create_task(self._reap(), name=f"publisher-reaper-{self._bus.name}")

    async def publish(
        self,
        subject: str,
        payload: bytes,
        *,
        msg_id: str | None = None,
        headers: Mapping[str, str] | None = None,
        ttl: float | None = None,
    ) -> None:
        """Send one message; returns once it is written and the window has room for the next.

        `msg_id` becomes `Nats-Msg-Id` (the stream drops a repeat within its dedup window);
        `ttl` becomes `Nats-TTL` (the stream must allow per-message TTLs, as LH_OBJECTS does).
        """
        if self._sub is None:
            await self._start()
        while len(self._in_flight) >= self._window:
            self._room.clear()
            await self._room.wait()
        hdrs: dict[str, str] = dict(headers) if headers else {}
        if msg_id:
            hdrs[MSG_ID_HEADER] = msg_id
        if ttl is not None:
            hdrs[TTL_HEADER] = f"{max(1, round(ttl))}s"
        if self._trace and get_current_span().get_span_context().is_valid:
            inject_trace(hdrs)
        self._next += 1
        token = str(self._next)
        now = time.monotonic()
        data = None
        if self._fast:
            encoded = framing.encode_headers(hdrs) if hdrs else None
            data = framing.frame(subject, self._prefix + token, encoded, payload)
        item = _InFlight(
            subject, payload, hdrs or None, msg_id or "", now, now + self._ack_timeout, data, last_sent=now
        )
        self._in_flight[token] = item
        self._drained.clear()
        try:
            await self._send(token, item)
        except BaseException:
            self._done(token)  # not sent (closed connection, oversized payload): the caller hears it
            raise

    async def _send(self, token: str, item: _InFlight, *, wait: bool = True) -> bool:
        """Write `item`; True once written. Disconnected with the buffer full, wait for the
        connection (`wait`) or return False."""
        nc = self._bus.nc
        while True:
            try:
                if item.frame is not None:
                    await framing.send(nc, item.frame, len(item.payload))
                else:
                    await nc.publish(item.subject, item.payload, self._prefix + token, item.headers)
                return True
            except OutboundBufferLimitError:
                if not wait:
                    return False
                await self._bus.connected.wait()

    async def _on_ack(self, msg: Msg) -> None:
        token = msg.subject[len(self._prefix) :]
        item = self._in_flight.get(token)
        if item is None:
            return  # a late ack of a message already re-sent and acknowledged
        if msg.headers and msg.headers.get("Status") == "503":
            # No responders: no stream for the subject, or JetStream is (re)starting. Retry a while.
            self._retry_soon(item, "no stream answered (JetStream unavailable or no stream for subject)")
            return
        data = msg.data
        if b'"error"' not in data and b'"duplicate"' not in data and data.startswith(b'{"stream"'):
            self.published += 1  # the common case, without decoding
            self._done(token)
            return
        try:
            ack = _ack_decoder.decode(data)
        except msgspec.DecodeError as e:
            self._fail(token, item, f"unreadable ack: {e}")
            return
        if ack.error is not None:
            error = f"{ack.error.description} (err_code {ack.error.err_code})"
            if ack.error.code == 503:
                self._retry_soon(item, error)
            else:
                self._fail(token, item, error)
            return
        if ack.duplicate:
            self.duplicates += 1
        self.published += 1
        self._done(token)

    def _retry_soon(self, item: _InFlight, error: str) -> None:
        """Let the reaper re-send `item` after a short, growing delay (or give up on schedule)."""
        item.last_error = error
        item.deadline = time.monotonic() + min(self._ack_timeout, 0.05 * 2**item.retries)
        item.retries += 1

    def _fail(self, token: str, item: _InFlight, error: str) -> None:
        log.warning("publish to %s [%s] failed: %s", item.subject, item.msg_id, error)
        self._failures.append(PublishFailure(item.subject, item.msg_id, error))
        self._done(token)

    def _done(self, token: str) -> None:
        del self._in_flight[token]
        if len(self._in_flight) < self._window:
            self._room.set()
        if not self._in_flight:
            self._drained.set()

    async def _reap(self) -> None:
        """Re-send messages whose ack is overdue (lost in a reconnect); give up after a while."""
        interval = min(0.1, self._ack_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            if not self._in_flight:
                continue
            try:
                await self._reap_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let the reaper die: flush() relies on it
                log.warning("publisher %s: re-sending failed: %s: %s", self._bus.name, type(e).__name__, e)

    async def _reap_once(self) -> None:
        now = time.monotonic()
        if self._bus.reconnects != self._seen_reconnects and self._bus.nc.is_connected:
            # Reconnected: what was written before the disconnect may be lost; re-send it now
            # rather than after its ack timeout (a duplicate is dropped by its Nats-Msg-Id).
            self._seen_reconnects = self._bus.reconnects
            for item in self._in_flight.values():
                if item.last_sent <= self._bus.disconnected_at:
                    item.deadline = now
        else:
            oldest = next(iter(self._in_flight.values()))
            if oldest.first_sent + self._ack_timeout > now:
                return  # every deadline is at least that far away: nothing is overdue yet
        nc = self._bus.nc
        for token, item in list(self._in_flight.items()):
            if token not in self._in_flight:
                continue
            if nc.is_closed:
                self._fail(token, item, "connection closed before the ack came")
            elif now - item.first_sent >= self._give_up_after:
                why = f"not stored within {self._give_up_after:g}s"
                self._fail(token, item, f"{why}: {item.last_error}" if item.last_error else why)
            elif item.deadline <= now and nc.is_connected:
                item.deadline = now + self._ack_timeout
                item.last_sent = now
                why = item.last_error or "ack overdue"
                log.debug("re-sending %s [%s]: %s", item.subject, item.msg_id, why)
                if not await self._send(token, item, wait=False):
                    return  # disconnected meanwhile: the next round tries again

    async def flush(self) -> None:
        """Wait until every message published so far is acknowledged or given up (`give_up_after`).

        Raises `PublishError` listing the messages that were not stored, and forgets them.
        Bound the wait with `asyncio.timeout` if needed.
        """
        if self._in_flight:
            await self._drained.wait()
        if self._failures:
            failures, self._failures = self._failures, []
            raise PublishError(failures)

    async def close(self) -> None:
        """Stop listening for acks; call `flush` first to know that everything arrived."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
