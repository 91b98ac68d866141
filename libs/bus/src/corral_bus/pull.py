"""A continuous pull from a JetStream consumer: requests stay ahead of the handler, no per-message tasks.

nats-py's `fetch` is one round trip per batch and creates an asyncio task per message; at tens of
thousands of events a second that overhead, not NATS, is the limit. `PullFeed` keeps pull requests
outstanding (asking for more when half of what was asked for has arrived, as the official clients'
`consume` does), receives messages through one subscription callback into a local queue, and
understands the server's status messages: heartbeats prove the pull is alive, 408/409 say a request
ended and how many of its messages will not come, "Consumer Deleted" says to re-create.

`stale` turns true when requests are outstanding but nothing (not even a heartbeat) came for three
heartbeat intervals: the server restarted or the connection dropped, and the owner re-binds.

A feed whose messages are never acked (`raw=True`: the bootstrap reader's) takes them straight from
nats-py's protocol parser (corral_bus.natsinternals.route_messages) as `RawMessage`s, headers left
unparsed until asked for, and hands them out a batch at a time (`take`): a decision service follows
LH_OBJECTS at one event per change of the cluster, and nats-py's `Msg`, header parsing, queue and
callback task per message cost it more than its decision did. Status messages still take nats-py's
path, which is rare and keeps one parser of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from corral_bus import natsinternals
from corral_bus.connection import Bus

log = logging.getLogger("corral.bus.pull")

_STATUS = "Status"
_DESCRIPTION = "Description"
_PENDING_MSGS = "Nats-Pending-Messages"
_STATUS_LINE = b"NATS/1.0 "


class RawHeaders(Mapping[str, str]):
    """A message's header block, parsed on first look (most readers never look)."""

    __slots__ = ("_block", "_parsed")

    def __init__(self, block: bytes) -> None:
        self._block = block
        self._parsed: dict[str, str] | None = None

    def _headers(self) -> dict[str, str]:
        parsed = self._parsed
        if parsed is None:
            parsed = self._parsed = parse_headers(self._block)
        return parsed

    def __getitem__(self, key: str) -> str:
        return self._headers()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers())

    def __len__(self) -> int:
        return len(self._headers())

    def __contains__(self, key: object) -> bool:
        return key in self._headers()


def parse_headers(block: bytes) -> dict[str, str]:
    """`NATS/1.0` header lines as a dict (the first value of a repeated name, as nats-py keeps)."""
    headers: dict[str, str] = {}
    for line in block.decode(errors="replace").split("\r\n")[1:]:
        name, colon, value = line.partition(":")
        name = name.strip()
        if colon and name and name not in headers:
            headers[name] = value.strip()
    return headers


class RawMessage:
    """One delivery taken from the parser: what a reader of an unacknowledged feed needs."""

    __slots__ = ("data", "headers", "reply", "subject")

    def __init__(self, subject: str, reply: str, data: bytes, headers: Mapping[str, str]) -> None:
        self.subject = subject
        self.reply = reply
        self.data = data
        self.headers = headers


_NO_HEADERS: Mapping[str, str] = {}


class PullFeed:
    """Messages of consumer `consumer` on `stream`, pulled `batch` at a time, in delivery order."""

    def __init__(
        self,
        bus: Bus,
        stream: str,
        consumer: str,
        *,
        batch: int = 256,
        expires: float = 10.0,
        heartbeat: float = 1.0,
        raw: bool = False,
    ) -> None:
        """`raw`: the messages are never acked; read them with `take` (see the module docstring)."""
        self.bus = bus
        self.stream = stream
        self.consumer = consumer
        self.batch = max(1, batch)
        self.expires = expires
        self.heartbeat = heartbeat
        self.consumer_deleted = False
        # Received, not yet taken, with the time each arrived (its ack timer runs from then).
        self._buffer: deque[tuple[Msg, float]] = deque()
        self.raw = raw
        self._raw: list[RawMessage] = []
        self._arrived = asyncio.Event()
        self._outstanding = 0
        self._last_activity = time.monotonic()
        self._requested_at = 0.0
        self._sub: Subscription | None = None
        self._inbox = ""
        self._next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"

    async def start(self) -> None:
        self._inbox = self.bus.nc.new_inbox()
        self._sub = await self.bus.nc.subscribe(self._inbox, cb=self._on_msg, pending_msgs_limit=0)
        if self.raw and natsinternals.supported(self.bus.nc):
            natsinternals.route_messages(self.bus.nc, self._sub, self._on_raw)

    async def close(self) -> None:
        if self._sub is not None:
            if self.raw:
                natsinternals.unroute_messages(self.bus.nc, self._sub)
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    @property
    def stale(self) -> bool:
        quiet = time.monotonic() - max(self._last_activity, self._requested_at)
        return self._outstanding > 0 and quiet > 3 * self.heartbeat

    @property
    def outstanding(self) -> int:
        """Messages asked for and neither received nor known to be not coming."""
        return self._outstanding

    async def wait_arrival(self, wait: float) -> None:
        self._arrived.clear()
        # Not asyncio.wait_for: on Python 3.11 it returns normally when the task is cancelled just
        # as the event fires, and the cancellation is lost (the reader then read on for ever).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(wait):
                await self._arrived.wait()

    def give_back(self) -> list[Msg]:
        """Everything received but not yet taken (to nak on shutdown)."""
        taken = [msg for msg, _ in self._buffer]
        self._buffer.clear()
        return taken

    def _on_raw(self, subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> bool:
        """A delivery straight from the parser (raw feeds); status messages are declined, so they
        come to `_on_msg` as nats-py parses them. Runs inside nats-py's reading loop: never raises."""
        if headers is not None and headers.startswith(_STATUS_LINE):
            return False
        self._last_activity = time.monotonic()
        if self._outstanding > 0:
            self._outstanding -= 1
        self._raw.append(
            RawMessage(
                subject.decode(),
                reply.decode(),
                data,
                RawHeaders(headers) if headers is not None else _NO_HEADERS,
            )
        )
        self._arrived.set()
        return True

    async def _on_msg(self, msg: Msg) -> None:
        self._last_activity = time.monotonic()
        headers = msg.headers
        status = headers.get(_STATUS) if headers else None
        if not status:
            if self._outstanding > 0:  # after a reset, stragglers of forgotten requests still come
                self._outstanding -= 1
            if self.raw:  # nats-py's internals not routable here: the same, the slow way
                self._raw.append(RawMessage(msg.subject, msg.reply, msg.data, headers or _NO_HEADERS))
            else:
                self._buffer.append((msg, self._last_activity))
            self._arrived.set()
            return
        if status == "100":
            return  # heartbeat: the pull is alive
        assert headers is not None
        description = headers.get(_DESCRIPTION, "")
        if status == "409" and "Consumer Deleted" in description:
            self.consumer_deleted = True
            self._outstanding = 0
        elif _PENDING_MSGS in headers:
            # A request ended (expired, leadership change, ...) with this many messages undelivered.
            self._outstanding -= int(headers[_PENDING_MSGS])
        elif status in ("404", "408") or (status == "409" and "Leadership Change" in description):
            self._outstanding = 0
        else:
            # A refused pull request (400 Bad Request, 409 Exceeded MaxRequestBatch, ...): say why,
            # and forget it so the next request is made (and refused visibly) instead of waiting.
            log.warning("pull from %s/%s refused: %s %s", self.stream, self.consumer, status, description)
            self._outstanding = 0
        self._outstanding = max(0, self._outstanding)
        self._arrived.set()

    async def _request(self) -> None:
        want = self.batch - self._outstanding
        if want <= 0:
            return
        body = {
            "batch": want,
            "expires": int(self.expires * 1_000_000_000),
            "idle_heartbeat": int(self.heartbeat * 1_000_000_000),
        }
        await self.bus.nc.publish(self._next_subject, json.dumps(body).encode(), reply=self._inbox)
        self._outstanding += want
        self._requested_at = time.monotonic()

    def reset(self) -> None:
        """Forget outstanding requests (they died with the server or the connection)."""
        self._outstanding = 0

    async def next(self, wait: float) -> Msg | None:
        """The next message, or None when none came within `wait` seconds."""
        if self._outstanding <= self.batch // 2 and len(self._buffer) <= self.batch // 2:
            await self._request()
        if self._buffer:
            return self._buffer.popleft()[0]
        await self.wait_arrival(wait)
        if self._buffer:
            return self._buffer.popleft()[0]
        return None

    async def take(self, wait: float) -> list[RawMessage]:
        """Every message received so far (raw feeds), waiting up to `wait` seconds for one."""
        if self._outstanding <= self.batch // 2 and len(self._raw) <= self.batch // 2:
            await self._request()
        if not self._raw:
            await self.wait_arrival(wait)
        taken, self._raw = self._raw, []
        return taken

    def take_ready(self) -> Msg | None:
        """A message already received, without waiting (None if there is none)."""
        return self._buffer.popleft()[0] if self._buffer else None

    def waiting_since(self, before: float) -> list[Msg]:
        """Messages received before `before` (monotonic) and still waiting to be taken."""
        return [msg for msg, arrived in self._buffer if arrived < before]


def delivery_position(reply: str) -> tuple[int, int]:
    """(stream_seq, num_pending) of a JetStream delivery, from its reply subject: what a reader
    that never acks needs of `ack_metadata`."""
    tokens = reply.split(".")
    if len(tokens) == 9 and tokens[1] == "ACK":
        return int(tokens[5]), int(tokens[8])
    _, _, seq, pending = ack_metadata(reply)
    return seq, pending


def ack_metadata(reply: str) -> tuple[str, int, int, int]:
    """(stream, num_delivered, stream_seq, num_pending) from a JetStream message's reply subject.

    The same facts as nats-py's `Msg.metadata`, without building datetimes per message.
    """
    tokens = reply.split(".")
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return tokens[2], int(tokens[4]), int(tokens[5]), int(tokens[8])
    if len(tokens) >= 11 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return tokens[4], int(tokens[6]), int(tokens[7]), int(tokens[10])
    raise ValueError(f"not a JetStream delivery: reply subject {reply!r}")
