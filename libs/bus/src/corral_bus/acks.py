"""Pipelined JetStream publish acks: the one implementation every corral publisher is built on.

Waiting for each ack before sending the next message caps a Python publisher at a few thousand
messages a second; sending without waiting for acks at all floods the server and loses messages
without anyone noticing. `AckPipeline` keeps a bounded window of messages in flight: each goes out
with a reply subject of its own under one inbox subscription (`<inbox>.<token>`, tokens counting up
in publish order), and every JetStream ack is matched to its message: stored, stored before (a
duplicate by `Nats-Msg-Id`, which is a success), or refused and why.

What to do about a refused message, or one whose ack never comes, depends on the publisher, so it is
left to a subclass (`_refused`, `_check`): `corral_bus.Publisher` re-sends that one message with the
same `Nats-Msg-Id` and gives up after a while; the watcher's `OrderedPublisher` chains each
subject's messages with `Nats-Expected-Last-Subject-Sequence` (`Pending.expect`) and re-sends what
is in flight, in order, for as long as it lives. The window, the tokens, the framing, ack matching,
`flush`, and the task that supervises what is overdue are shared here.

On a nats-py whose internals `corral_bus.natsinternals` knows, frames go straight into the client's
send buffer and acks are handled inside the protocol parser; otherwise (or with `start(fast=False)`)
the same pipeline runs on nats-py's public `publish` and subscription callback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import MaxPayloadError, OutboundBufferLimitError

from corral_bus import natsinternals
from corral_bus.cancellation import cancel_and_wait
from corral_bus.connection import Bus
from corral_bus.framing import frame
from corral_bus.streams import EXPECTED_LAST_SUBJECT_SEQ_HEADER, MSG_ID_HEADER

log = logging.getLogger("corral.bus.acks")

Message = tuple[str, bytes, str, Mapping[str, str] | None]
"""(subject, payload, Nats-Msg-Id or "", further headers or None)"""

OnStored = Callable[[float], None]
"""Called with the monotonic time the message was (last) sent, once the stream stored it."""

NO_STREAM = "no stream answered (JetStream unavailable or no stream for subject)"


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
class Pending:
    """A message sent and not yet acknowledged (or refused and waiting for the policy's decision).

    Lean on purpose: one is made per message on the watcher's hot path. A policy keeps what it
    needs about retries on the side, for the few messages that have any."""

    subject: str
    payload: bytes
    msg_id: str
    headers: Mapping[str, str] | None
    sent_at: float
    """Monotonic time of the latest send (a re-send moves it)."""
    on_stored: OnStored | None
    expect: int = -1
    """With 0 or more, the message carries `Nats-Expected-Last-Subject-Sequence: expect`."""


class AckPipeline:
    """The shared core: a window of unacknowledged messages, matched to their acks.

    Subclasses decide about failures: `_refused` (an ack said no) and `_check` (run by the
    supervising task every `check_every` seconds while anything is in flight, at once after
    `_trouble` is set). Safe to share between tasks of one event loop.
    """

    def __init__(self, bus: Bus, *, window: int, ack_timeout: float, check_every: float) -> None:
        if window < 1:
            raise ValueError("window must be at least 1")
        self._bus = bus
        self._window = window
        self._ack_timeout = ack_timeout
        self._check_every = check_every
        self._pending: dict[int, Pending] = {}
        self._next = 0
        self._prefix = ""
        self._prefix_bytes = b""
        self._room = asyncio.Event()
        self._room.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._trouble = asyncio.Event()
        self._paused = False
        # JetStream answers one connection's publishes to one stream in order: once a later token is
        # acknowledged, an earlier one still pending will not be (see OrderedPublisher).
        self._max_acked = 0
        self._last_ack_at = 0.0
        self._sub: Subscription | None = None
        self._fast = False
        self._supervisor: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        self.stored = 0
        """Messages the stream acknowledged, duplicates included."""
        self.duplicates = 0
        """Acks saying the stream already held that Nats-Msg-Id."""

    @property
    def bus(self) -> Bus:
        """The connection it publishes on (for a caller's own side messages, e.g. dead letters)."""
        return self._bus

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def fast(self) -> bool:
        """True when frames and acks bypass nats-py's public API (see natsinternals)."""
        return self._fast

    async def start(self, fast: bool = True) -> None:
        """Subscribe to the acks (publishing does it otherwise); `fast=False` keeps to nats-py's
        public API."""
        async with self._starting:
            if self._sub is not None:
                return
            nc = self._bus.nc
            self._prefix = nc.new_inbox() + "."
            self._prefix_bytes = self._prefix.encode()
            self._sub = await nc.subscribe(self._prefix + "*", cb=self._on_ack_msg, pending_msgs_limit=0)
            if fast and natsinternals.supported(nc):
                natsinternals.route_acks(nc, self._sub, self._on_ack_raw)
                self._fast = True
            self._supervisor = asyncio.create_task(self._supervise(), name=f"acks-{self._bus.name}")

    async def close(self) -> None:
        """Stop listening for acks; `flush` first to know that everything arrived."""
        supervisor, self._supervisor = self._supervisor, None
        await cancel_and_wait(supervisor)
        sub, self._sub = self._sub, None
        if sub is not None:
            if self._fast:
                natsinternals.unroute_acks(self._bus.nc, sub)
                self._fast = False
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def flush(self) -> None:
        """Wait until nothing is in flight any more (stored, or given up by the policy)."""
        if self._pending:
            await self._drained.wait()

    # Sending

    async def _submit(
        self,
        subject: str,
        payload: bytes,
        msg_id: str,
        headers: Mapping[str, str] | None,
        on_stored: OnStored | None = None,
        expect: int = -1,
    ) -> None:
        """Send one message; returns once it is written and the window has room for the next.
        What cannot be written (closed connection, oversized payload, bad subject) raises and is
        not left in flight. `expect`: see `Pending.expect`."""
        if self._sub is None:
            await self.start()
        if self._paused or len(self._pending) >= self._window:
            await self._wait_for_room()
        self._next += 1
        token = self._next
        now = time.monotonic()
        item = Pending(subject, payload, msg_id, headers, now, on_stored, expect)
        self._pending[token] = item
        self._drained.clear()
        try:
            await self._write_one(token, item, wait=True)
        except BaseException:
            self._forget(token)
            raise

    async def _submit_batch(
        self,
        messages: Sequence[Message],
        on_last_stored: OnStored | None,
        expects: Sequence[int] | None = None,
        callbacks: Sequence[OnStored | None] | None = None,
    ) -> None:
        """Send messages in order, framed into the client's buffer a window at a time;
        `on_last_stored` runs when the last one is stored. `expects`, one per message: see
        `Pending.expect`; `callbacks`, one per message, replace `on_last_stored`."""
        if not messages:
            return
        if self._sub is None:
            await self.start()
        last = len(messages) - 1
        if callbacks is None:
            callbacks = [None] * last + [on_last_stored]
        if not self._fast:
            for i, (subject, payload, msg_id, headers) in enumerate(messages):
                expect = -1 if expects is None else expects[i]
                await self._submit(subject, payload, msg_id, headers, callbacks[i], expect)
            return
        pending = self._pending
        prefix = self._prefix_bytes
        window = self._window
        max_payload = self._bus.nc.max_payload
        frames: list[bytes] = []
        first = self._next + 1  # the frames not yet written carry tokens first..self._next
        now = time.monotonic()
        self._drained.clear()
        try:
            for i, (subject, payload, msg_id, headers) in enumerate(messages):
                if self._paused or len(pending) >= window:
                    # Out of room: what is framed must go out first, or no ack could ever make room.
                    framed, frames = frames, []
                    await self._write_frames(framed, first)
                    first = self._next + 1
                    await self._wait_for_room()
                    self._drained.clear()  # the acks that made room may have emptied the window
                    now = time.monotonic()
                if len(payload) > max_payload:
                    raise MaxPayloadError
                self._next += 1
                token = self._next
                expect = -1 if expects is None else expects[i]
                frames.append(frame(subject, b"%b%d" % (prefix, token), msg_id, headers, payload, expect))
                pending[token] = Pending(subject, payload, msg_id, headers, now, callbacks[i], expect)
        finally:
            # Even when a message of the batch was refused: those before it are in the window.
            await self._write_frames(frames, first)

    async def _write_frames(self, frames: list[bytes], first: int) -> None:
        """Write the frames of tokens `first`, `first + 1`, ... into the client's buffer."""
        if not frames:
            return
        while True:
            try:
                await natsinternals.write(self._bus.nc, frames)
                return
            except OutboundBufferLimitError:
                # Disconnected and the client's buffer is full: wait for the connection.
                await self._bus.connected.wait()
            except BaseException:
                for token in range(first, first + len(frames)):
                    self._forget(token)
                raise

    async def _write_one(self, token: int, item: Pending, *, wait: bool) -> bool:
        """Write `item` under `token`; True once written. Disconnected with the client's buffer
        full, wait for the connection (`wait`) or return False."""
        nc = self._bus.nc
        while True:
            try:
                if self._fast:
                    if len(item.payload) > nc.max_payload:
                        raise MaxPayloadError
                    reply = b"%b%d" % (self._prefix_bytes, token)
                    data = frame(item.subject, reply, item.msg_id, item.headers, item.payload, item.expect)
                    await natsinternals.write(nc, [data])
                else:
                    await nc.publish(item.subject, item.payload, f"{self._prefix}{token}", _all_headers(item))
                return True
            except OutboundBufferLimitError:
                if not wait:
                    return False
                await self._bus.connected.wait()

    async def _wait_for_room(self) -> None:
        while self._paused or len(self._pending) >= self._window:
            self._room.clear()
            await self._room.wait()

    async def _rewrite(self, token: int, item: Pending) -> bool:
        """Send a pending message again under its own token (an ack of either send settles it);
        False when the client's buffer is full while disconnected."""
        item.sent_at = time.monotonic()
        return await self._write_one(token, item, wait=False)

    async def _resend_in_order(self, items: Sequence[Pending]) -> None:
        """Send `items` again under new tokens, in this order, before anything new goes out."""
        self._paused = True
        self._room.clear()
        try:
            now = time.monotonic()
            for item in items:
                self._next += 1
                item.sent_at = now
                self._pending[self._next] = item
                self._drained.clear()
                await self._write_one(self._next, item, wait=True)
        finally:
            self._paused = False
            if len(self._pending) < self._window:
                self._room.set()
            if not self._pending:
                self._drained.set()

    def _forget(self, token: int) -> None:
        """Take a message out of the window without an ack (given up, or never written)."""
        if self._pending.pop(token, None) is None:
            return
        if len(self._pending) < self._window:
            self._room.set()
        if not self._pending:
            self._drained.set()

    # Acks

    async def _on_ack_msg(self, msg: Msg) -> None:
        """Acks through nats-py's public subscription callback (the slow path)."""
        headers = msg.headers
        no_responders = headers is not None and headers.get("Status") == "503"
        self._acked(msg.subject[len(self._prefix) :].encode(), msg.data, no_responders)

    def _on_ack_raw(self, subject: bytes, data: bytes, headers: bytes | None) -> None:
        """Acks straight from the protocol parser (the fast path; see natsinternals.route_acks)."""
        no_responders = headers is not None and b" 503" in headers[:16]
        self._acked(subject[len(self._prefix_bytes) :], data, no_responders)

    def _acked(self, token_text: bytes, data: bytes, no_responders: bool) -> None:
        # Runs inside nats-py's reading loop on the fast path: it must never raise.
        try:
            token = int(token_text)
        except ValueError:
            return
        pending = self._pending
        item = pending.pop(token, None)
        if item is None:
            return  # a late ack of a message already settled, or collapsed away by the policy
        if no_responders or not data or b'"error"' in data:
            pending[token] = item  # still the policy's to settle
            self._refusal(token, item, data, no_responders)
            return
        self.stored += 1
        if b'"duplicate"' in data and self._is_duplicate(data):
            self.duplicates += 1
        self._last_ack_at = time.monotonic()
        if token > self._max_acked:
            self._max_acked = token
        self._after_store(token, item, data)
        if pending:
            if len(pending) < self._window:
                self._room.set()
        else:
            self._room.set()
            self._drained.set()
        if item.on_stored is not None:
            try:
                item.on_stored(item.sent_at)
            except Exception:
                log.exception("ack callback for %s failed", item.subject)

    @staticmethod
    def _is_duplicate(data: bytes) -> bool:
        try:
            return _ack_decoder.decode(data).duplicate
        except msgspec.DecodeError:
            return False

    def _refusal(self, token: int, item: Pending, data: bytes, no_responders: bool) -> None:
        if no_responders:
            self._refused(token, item, NO_STREAM, retryable=True, err_code=0)
            return
        try:
            error = _ack_decoder.decode(data).error
        except msgspec.DecodeError:
            self._refused(token, item, f"unreadable ack: {data[:200]!r}", retryable=False, err_code=0)
            return
        if error is None:
            self._refused(token, item, f"unreadable ack: {data[:200]!r}", retryable=False, err_code=0)
            return
        description = f"{error.description} (err_code {error.err_code})"
        self._refused(token, item, description, retryable=error.code == 503, err_code=error.err_code)

    # Policy hooks

    def _after_store(self, token: int, item: Pending, ack: bytes) -> None:
        """Called once the stream stored the message of `token` (already out of the window);
        `ack` is the PubAck's JSON (see `ack_sequence`)."""

    def _refused(self, token: int, item: Pending, error: str, *, retryable: bool, err_code: int) -> None:
        """An ack refused the message of `token` (still in the window). `retryable`: JetStream was
        unavailable (503), so the same message may well be stored later; `err_code`: JetStream's
        error code (0 when there is none). Default: keep it and let `_check` decide soon."""
        self._trouble.set()

    async def _check(self, urgent: bool) -> None:
        """Act on what is overdue; `urgent` when `_trouble` was set. Default: nothing."""

    async def _supervise(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._check_every):
                    await self._trouble.wait()
            urgent = self._trouble.is_set()
            self._trouble.clear()
            if not self._pending:
                continue
            try:
                await self._check(urgent)
            except Exception:
                # This task is the only way lost messages get re-sent: it must outlive any failure.
                log.exception("publisher %s: handling unacknowledged messages failed", self._bus.name)
                await asyncio.sleep(self._check_every)


def _all_headers(item: Pending) -> dict[str, str] | None:
    headers = {MSG_ID_HEADER: item.msg_id} if item.msg_id else {}
    if item.headers:
        headers.update(item.headers)
    if item.expect >= 0:
        headers[EXPECTED_LAST_SUBJECT_SEQ_HEADER] = str(item.expect)
    return headers or None


def ack_sequence(ack: bytes) -> int:
    """The stream sequence a PubAck reports (0 when it says none), without decoding the whole
    JSON: this runs for every acknowledged message of the watcher. For a duplicate it is the
    sequence of the message stored first under that id."""
    start = ack.rfind(b'"seq":')
    if start < 0:
        return 0
    try:
        # The common ack ends with the sequence: {"stream":"LH_OBJECTS","seq":123}
        return int(ack[start + 6 : -1])  # int() takes the spaces around the digits
    except ValueError:
        pass
    end = ack.find(b",", start)
    if end < 0:
        end = len(ack)
    try:
        return int(ack[start + 6 : end])
    except ValueError:
        return 0
