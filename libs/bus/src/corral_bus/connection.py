"""One connection to NATS per service: the client, its JetStream context, and reconnect bookkeeping.

Reconnects are the normal case (a NATS pod restarts during a Longhorn upgrade too), so the client
reconnects forever and buffers publishes meanwhile; consumers watch `Bus.reconnects` to re-create
their server-side state, which a restarted server without persistence would have lost.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import nats
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from corral_bus.auth import NatsAuth
from corral_bus.errors import NotAuthorized
from corral_bus.natsinternals import connected_server_id

log = logging.getLogger("corral.bus")

# Publishes buffered while disconnected, and the write buffer of a pipelined publisher.
_PENDING_BYTES = 32 * 1024 * 1024
_PERMISSIONS_VIOLATION = "permissions violation"
_AUTHORIZATION_VIOLATION = "authorization violation"
CLOSE_FLUSH_S = 2
"""How long `Bus.close` waits for the server to confirm what was written before closing anyway."""


@dataclass(eq=False)
class Bus:
    """A connected client. `reconnects` counts reconnections; `connected` is set while connected."""

    nc: NATS
    js: JetStreamContext
    name: str
    user: str = ""
    """The NATS user it authenticated as (empty: anonymous), whose permissions bound what it may do."""
    reconnects: int = 0
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    disconnected_at: float = 0.0
    """Monotonic time of the last disconnect: what was sent before it may never have arrived."""
    denials: deque[str] = field(default_factory=lambda: deque(maxlen=100))
    """The server's latest permission violations on this connection (corral_bus.permissions): a
    publish or subscription this user may not make. The server says so only asynchronously; after
    `await nc.flush()` every earlier one is here."""
    disconnect_listeners: list[Callable[[], None]] = field(default_factory=list)
    """Called (synchronously) on every disconnect, closing included: whoever must stop at once
    when the connection goes (a lease holder, corral_bus.lease) is told without polling."""

    @property
    def is_connected(self) -> bool:
        return self.nc.is_connected

    @property
    def generation(self) -> int:
        """Which connection this is: grows by one with every reconnect. nats-py counts a reconnect
        once the server accepted it, before it reports itself connected again, so a request sent
        and answered under one generation, connected at both ends, went over a single connection."""
        return int(self.nc.stats["reconnects"])

    @property
    def server_id(self) -> str:
        """The id of the server this connection is to (empty before the first connection)."""
        return connected_server_id(self.nc)

    async def close(self) -> None:
        """Have the server confirm everything written so far (acks, publishes), then close; safe to
        call twice.

        Not nats-py's `drain`: it waits until every subscription's queued messages are handled, and a
        service that has stopped consuming leaves some there for good (a pull request's late 408
        after its fetch gave up, deliveries behind a stopped handler), so drain held the exit for its
        whole 30 s timeout and the pod was killed instead of stopping. Messages not yet acked are
        redelivered to whoever consumes next, which is what a stop must mean anyway."""
        if self.nc.is_closed:
            return
        if self.nc.is_connected:
            try:
                await self.nc.flush(timeout=CLOSE_FLUSH_S)
            except Exception as e:  # a broken or slow connection: close sends what it can
                log.debug("flush of %s before close failed: %s", self.name, e)
        try:
            await self.nc.close()
        except Exception as e:  # closing while disconnected: nats-py still tries to flush
            log.debug("close of %s: %s", self.name, e)
        self.connected.clear()

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def server_list(servers: str | Sequence[str]) -> list[str]:
    """The server URLs of one URL, a comma-separated list of them, or a sequence."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    return [item.strip() for item in items if item.strip()]


async def connect(
    servers: str | Sequence[str],
    name: str,
    *,
    reconnect_wait: float = 0.5,
    connect_timeout: float = 2.0,
    max_reconnect_attempts: int = -1,
    js_timeout: float = 5.0,
    ping_interval: float = 10.0,
    max_outstanding_pings: int = 3,
    auth: NatsAuth | None = None,
    refused_is_final: bool = False,
) -> Bus:
    """Connect to NATS as `name` (shown in the server's connection list) and return a `Bus`.

    `auth`: the user, password and TLS of this client (corral_bus.auth); None connects anonymously
    (or as the URL's userinfo says: services refuse such a URL at start-up, see
    corral_runtime.service, and nothing here logs one with its userinfo).

    Retries the first connection as well as later ones (`max_reconnect_attempts=-1`: forever), so a
    service started before NATS waits for it; wrap in `asyncio.timeout` to bound that. `servers` is
    one URL, a comma-separated list (`CORRAL_NATS_URL` of a cluster: `nats://a:4222,nats://b:4222`)
    or a sequence. A server that stops answering without closing the connection (frozen, or cut off
    by a partition) is noticed after `ping_interval * max_outstanding_pings` seconds, and the client
    moves to another server of the list.

    `refused_is_final`: NATS refusing the credentials of the first connection raises NotAuthorized
    at once instead of retrying (and logging) until the caller's timeout: for a person at a
    terminal (the CLI). A service keeps retrying: its Secret may be fixed under it.
    """
    events = _ConnectionEvents(name, refused_is_final)
    nc = await nats.connect(
        servers=server_list(servers),
        name=name,
        error_cb=events.on_error,
        disconnected_cb=events.on_disconnected,
        reconnected_cb=events.on_reconnected,
        closed_cb=events.on_closed,
        allow_reconnect=True,
        max_reconnect_attempts=max_reconnect_attempts,
        reconnect_time_wait=reconnect_wait,
        connect_timeout=connect_timeout,
        ping_interval=ping_interval,
        max_outstanding_pings=max_outstanding_pings,
        pending_size=_PENDING_BYTES,
        **(auth or NatsAuth()).connect_options(),
    )
    bus = Bus(nc=nc, js=nc.jetstream(timeout=js_timeout), name=name, user=auth.user if auth else "")
    bus.connected.set()
    events.bus = bus
    return bus


class _ConnectionEvents:
    """nats-py's connection callbacks: each change logged, and the `Bus`'s bookkeeping (connected,
    reconnects, denials) kept once the first connection has made one."""

    def __init__(self, name: str, refused_is_final: bool) -> None:
        self.name = name
        self.refused_is_final = refused_is_final
        self.bus: Bus | None = None

    async def on_error(self, e: Exception) -> None:
        if self.refused_is_final and self.bus is None and _AUTHORIZATION_VIOLATION in str(e).lower():
            # raised inside nats-py's first-connect loop, which awaits this callback: it ends there
            raise NotAuthorized(f"NATS refused the credentials: {e}") from e
        if _PERMISSIONS_VIOLATION in str(e).lower():
            if self.bus is not None:
                self.bus.denials.append(str(e))
            log.error("nats %s: denied by the server: %s", self.name, e)
            return
        log.warning("nats %s: %s: %s", self.name, type(e).__name__, e)

    async def on_disconnected(self) -> None:
        if self.bus is not None:
            self.bus.connected.clear()
            self.bus.disconnected_at = time.monotonic()
            for listener in list(self.bus.disconnect_listeners):
                try:
                    listener()
                except Exception:
                    log.exception("nats %s: a disconnect listener failed", self.name)
            if self.bus.nc.is_closed or self.bus.nc.is_draining:
                log.info("nats %s: disconnected (closing)", self.name)
                return
        log.warning("nats %s: disconnected", self.name)

    async def on_reconnected(self) -> None:
        where = "?"
        if self.bus is not None:
            self.bus.reconnects += 1
            self.bus.connected.set()
            url = self.bus.nc.connected_url
            where = f"{url.hostname}:{url.port}" if url else "?"
        log.info("nats %s: reconnected to %s", self.name, where)

    async def on_closed(self) -> None:
        log.info("nats %s: connection closed", self.name)
