"""Every use of nats-py's private internals in corral, in one place, pinned to the versions checked.

nats-py spends about 20 µs of CPU per acknowledged publish: subject and header validation with
regular expressions, a header block rebuilt byte by byte, three coroutines per publish, and for every
ack a `Msg` object, a queue hop and a task switch before the callback runs. At the rates corral
publishes (the watcher: tens of thousands of events a second on a share of a CPU) that alone would
cap it below its floor. So the pipelined publisher (`corral_bus.acks`) writes ready-made protocol
frames into the client's own send buffer, where its flusher, reconnect buffering and ordering treat
them exactly as a `publish` of its own, and takes the acks of its inbox subscription straight from
the protocol parser, before nats-py builds anything for them.

The same parser hook hands a decision service's LH_OBJECTS deliveries to `corral_bus.pull.PullFeed`
(`route_messages`): a `Msg`, its parsed headers, a queue hop and a task switch per event cost more
than the decision itself.

While any route is set, the client's parser also reads MSG and HMSG frames on a fast path
(`_fast_parse`): nats-py tries two regular expressions per frame, copies its arguments into a dict
and goes round its loop twice, 2.8 µs a message; one split of the control line does it in 1.8. A
cold start of engine-upgrade at 100 k volumes reads 101 k of them before it may decide (issue 28).
Anything else (PING, +OK, -ERR, INFO, a frame cut in two by a read or not as the server writes it)
is left to nats-py's own parser, as before.

That needs private members of nats-py, listed below and nowhere else in corral: written against and
checked on nats-py 2.16.0. `tests/unit/bus/test_natsinternals.py` fails when the installed nats-py
is outside `SUPPORTED` or any member (and the signature it is called with) is missing, so upgrading
nats-py fails a test rather than production. Should a client instance lack them anyway, `supported`
says no and the publisher keeps to nats-py's public API: correct, only slower.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.errors import (
    ConnectionClosedError,
    ConnectionDrainingError,
    OutboundBufferLimitError,
    ProtocolError,
)
from nats.protocol.parser import AWAITING_CONTROL_LINE, MAX_CONTROL_LINE_SIZE

SUPPORTED = ((2, 16), (2, 17))
"""nats-py versions whose internals this module was checked against: at least the first, below
the second. Widen it only after reading the new release's `Client` for every member below."""

CLIENT_MEMBERS = (
    "_pending",
    "_pending_data_size",
    "_max_pending_size",
    "_flush_queue",
    "_flush_pending",
    "_process_msg",
    "_server_info",
    "_ps",
)
"""Members of `nats.aio.client.Client` touched here (and only here)."""

PARSER_MEMBERS = ("buf", "state", "parse")
"""Members of `nats.protocol.parser.Parser` (the client's `_ps`) touched here (and only here)."""

SUBSCRIPTION_MEMBERS = ("_id",)
"""Members of `nats.aio.subscription.Subscription` touched here (and only here)."""

AckHandler = Callable[[bytes, bytes, bytes | None], None]
"""(reply subject the ack was sent to, payload, raw header block or None)"""

MessageHandler = Callable[[bytes, bytes, bytes, bytes | None], bool]
"""(subject, reply subject, payload, raw header block or None) -> True when taken; False hands the
message to nats-py as usual (a `Msg` for the subscription's callback)."""


def installed_version() -> tuple[int, ...]:
    """The installed nats-py release as numbers (pre-release suffixes dropped)."""
    from importlib.metadata import version  # only the test and diagnostics ask: keep imports light

    numbers: list[int] = []
    for part in version("nats-py").split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def version_supported() -> bool:
    low, below = SUPPORTED
    return low <= installed_version() < below


def supported(nc: Client) -> bool:
    """Whether this client instance has every member the fast path uses."""
    return all(hasattr(nc, name) for name in CLIENT_MEMBERS) and all(
        hasattr(nc._ps, name) for name in PARSER_MEMBERS
    )


def subscription_id(sub: Subscription) -> int:
    """The sid the server tags this subscription's messages with."""
    sid: int = sub._id
    return sid


def connected_server_id(nc: Client) -> str:
    """The id the server of the current connection gave in its INFO ("" before any). nats-py keeps
    the INFO of each connection it makes, but offers no public accessor for its server id."""
    info: dict[str, Any] = nc._server_info
    return str(info.get("server_id", ""))


def buffer_full(nc: Client, size: int) -> bool:
    """Whether `size` more bytes would not fit the client's reconnect buffer (what makes nats-py's
    own `publish` raise OutboundBufferLimitError while disconnected)."""
    limit: int = nc._max_pending_size
    return limit <= 0 or size + nc.pending_data_size > limit


async def write(nc: Client, frames: list[bytes]) -> None:
    """Queue protocol frames for the client's flusher, as its `publish` does after validating;
    raises what `publish` raises for a closed, draining or (while disconnected) full client.
    Payload sizes are the caller's to check."""
    if nc.is_closed:
        raise ConnectionClosedError
    if nc.is_draining_pubs:
        raise ConnectionDrainingError
    size = sum(map(len, frames))
    if not nc.is_connected and buffer_full(nc, size):
        raise OutboundBufferLimitError
    client: Any = nc
    client._pending.extend(frames)
    client._pending_data_size += size
    nc.stats["out_msgs"] += len(frames)
    nc.stats["out_bytes"] += size  # framing included: counting payloads alone would cost per message
    if client._max_pending_size > 0 and client._pending_data_size > client._max_pending_size:
        await client._flush_pending(force_flush=True)  # what `publish` does past its buffer limit
    elif client._flush_queue is not None and client._flush_queue.empty():
        await client._flush_pending()  # wake the flusher unless a wake-up is already queued


ParseFn = Callable[[bytes], Awaitable[None]]

_HMSG = b"HMSG "
_MSG = b"MSG "
_CRLF = b"\r\n"


def _fast_parse(nc: Client) -> ParseFn:
    """The client parser's `parse`, with MSG and HMSG frames read here (see the module docstring).

    A frame is taken only when it is whole in the buffer and its control line splits into the
    fields the server writes; then exactly what nats-py would pass goes to `_process_msg` (the
    router's). Otherwise, and for every other operation, nats-py's parser reads on from there."""
    parser: Any = nc._ps
    original: ParseFn = parser.parse
    client: Any = nc

    async def parse(data: bytes = b"") -> None:
        buf: bytearray = parser.buf  # read each time: a reconnect gives the parser a new one
        buf.extend(data)
        while parser.state == AWAITING_CONTROL_LINE:
            if buf.startswith(_HMSG):
                skip = 5
            elif buf.startswith(_MSG):
                skip = 4
            else:
                break
            end = buf.find(_CRLF, skip, MAX_CONTROL_LINE_SIZE)
            if end < 0:
                if len(buf) < MAX_CONTROL_LINE_SIZE:
                    return  # the rest of the line is still on its way
                break  # no line end where one must be: nats-py says what is wrong
            # HMSG <subject> <sid> [reply] <header size> <size>; MSG <subject> <sid> [reply] <size>
            args = bytes(buf[skip:end]).split()
            if len(args) == skip - 1:
                args.insert(2, b"")  # no reply subject
            elif len(args) != skip:
                break
            try:
                sid, needed = int(args[1]), int(args[-1])
                headers_end = int(args[3]) if skip == 5 else 0
            except ValueError:
                raise ProtocolError("nats: malformed MSG") from None
            start = end + 2
            stop = start + needed
            if len(buf) < stop + 2:
                return  # the payload is still on its way: the line is read again with it
            if headers_end > 0:
                headers: bytes | None = bytes(buf[start : start + headers_end])
                payload = bytes(buf[start + headers_end : stop])
            else:
                headers = None
                payload = bytes(buf[start:stop])
            del buf[: stop + 2]
            await client._process_msg(sid, args[0], args[2], payload, headers)
            buf = parser.buf  # as nats-py reads `self.buf` anew after every message
        if buf:
            await original(b"")

    return parse


class _Router:
    """The one replacement of a client's `_process_msg`: messages of routed sids go to their
    handler in place; everything else goes through nats-py as before. Its parser reads MSG and
    HMSG frames on the fast path while the router is in place."""

    def __init__(self, nc: Client) -> None:
        client: Any = nc
        self.nc = client
        self.routes: dict[int, AckHandler] = {}
        self.message_routes: dict[int, MessageHandler] = {}
        original: Callable[..., Awaitable[None]] = client._process_msg
        routes = self.routes
        message_routes = self.message_routes
        # The parser awaits what _process_msg returns: an already finished future costs nothing to
        # await, where a coroutine per ack would be created, run and thrown away.
        finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        finished.set_result(None)

        def process_msg(
            sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
        ) -> Awaitable[None]:
            handler = routes.get(sid)
            if handler is not None:
                handler(subject, data, headers)
                return finished
            taker = message_routes.get(sid)
            if taker is not None and taker(subject, reply, data, headers):
                return finished
            return original(sid, subject, reply, data, headers)

        client._process_msg = process_msg
        client._ps.parse = _fast_parse(nc)

    def remove(self) -> None:
        # The wrappers are instance attributes shadowing the methods: deleting them restores nats-py's.
        del self.nc._process_msg
        del self.nc._ps.parse


_routers: weakref.WeakKeyDictionary[Client, _Router] = weakref.WeakKeyDictionary()


def route_acks(nc: Client, sub: Subscription, handler: AckHandler) -> None:
    """Deliver `sub`'s messages to `handler(subject, data, raw headers)` inside the protocol parser
    (no `Msg`, no task); call from the running event loop. The handler must not raise."""
    router = _routers.get(nc)
    if router is None:
        router = _routers[nc] = _Router(nc)
    router.routes[subscription_id(sub)] = handler


def route_messages(nc: Client, sub: Subscription, handler: MessageHandler) -> None:
    """Offer `sub`'s messages to `handler(subject, reply, data, raw headers)` inside the protocol
    parser first (no `Msg`, no header parsing, no task); what it declines (returns False) goes on to
    the subscription's callback. Call from the running event loop; the handler must not raise."""
    router = _routers.get(nc)
    if router is None:
        router = _routers[nc] = _Router(nc)
    router.message_routes[subscription_id(sub)] = handler


def unroute_acks(nc: Client, sub: Subscription) -> None:
    """Give `sub`'s messages back to nats-py; the last route gone restores the client untouched."""
    router = _routers.get(nc)
    if router is None:
        return
    router.routes.pop(subscription_id(sub), None)
    router.message_routes.pop(subscription_id(sub), None)
    if not router.routes and not router.message_routes:
        router.remove()
        del _routers[nc]


unroute_messages = unroute_acks
