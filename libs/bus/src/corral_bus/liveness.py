"""A lease holder's liveness subject: proof that a holder's connection is gone, sooner than expiry.

Every replica that may hold a lease subscribes (core NATS) to a subject of its own,
`corral.lease.<lease>.<holder>`, and answers requests there. A standby that wonders whether the
holder of a stale revision is still there sends it a request:

* the server answers "no responders" at once when it knows no subscription to that subject. A
  subscription lasts as long as the connection that made it, so when the holder made it on this
  same server, its connection is closed (SIGKILL, a crash, the server dropping it): `GONE`.
* an answer: the holder is there, only slow to renew (`ANSWERED`).
* no answer in time proves nothing: the holder may be frozen (SIGSTOP, a stalled event loop) with
  its connection open, or cut off while the server still holds its connection (`SILENT`).

Only a probe made on the server the holder renewed through can prove anything: in a cluster another
server learns of the holder's subscription over a route, and forgets it when that route breaks,
with the holder still connected. So the holder writes its server's id into the lease record, and a
standby connected elsewhere does not probe (`UNPROVABLE`) and keeps to the TTL rule.
"""

from __future__ import annotations

import enum
import logging

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import NoRespondersError

from corral_bus.connection import Bus
from corral_model.subjects import escape_token

log = logging.getLogger("corral.bus.liveness")

LIVENESS_PREFIX = "corral.lease"
"""`corral.lease.<lease>.<holder>`; each lease user may use `corral.lease.<its lease>.*` only
(corral_bus.permissions)."""


def liveness_subject(lease: str, holder: str) -> str:
    """The subject `holder` answers on while it may hold `lease`."""
    return f"{LIVENESS_PREFIX}.{escape_token(lease)}.{escape_token(holder)}"


class Probe(enum.Enum):
    """What asking a holder's liveness subject showed."""

    GONE = "gone"
    """No subscription on the holder's own server: its connection is closed."""
    ANSWERED = "answered"
    """It answered: alive, whatever it is doing about its renewals."""
    SILENT = "silent"
    """No answer in time: frozen or cut off, or just slow. Proves nothing."""
    UNPROVABLE = "unprovable"
    """Not asked: this client is not connected to the server the holder renewed through."""


async def probe(bus: Bus, subject: str, server: str, within: float) -> Probe:
    """Ask `subject` whether its holder is there, judged only on the holder's server `server`.

    `GONE` needs the request sent and refused on one connection to `server`: a reconnect in between
    could have taken it to another server, whose "no responders" would prove nothing."""
    if not server or not bus.is_connected or bus.server_id != server:
        return Probe.UNPROVABLE
    generation = bus.generation
    try:
        await bus.nc.request(subject, b"", timeout=within)
    except NoRespondersError:
        if bus.generation != generation or not bus.is_connected:
            return Probe.UNPROVABLE
        return Probe.GONE
    except Exception as e:  # a timeout above all; a connection lost meanwhile says nothing either
        log.debug("liveness probe of %s unanswered: %s: %s", subject, type(e).__name__, e)
        return Probe.SILENT
    return Probe.ANSWERED


class Responder:
    """Answers requests on this replica's liveness subject for as long as it is started."""

    def __init__(self, bus: Bus, subject: str) -> None:
        self.bus = bus
        self.subject = subject
        self._sub: Subscription | None = None

    async def start(self) -> None:
        """Subscribe. A denied subscription shows only as `verify()` failing: the lease then works by
        its TTL alone."""
        if self._sub is None:
            self._sub = await self.bus.nc.subscribe(self.subject, cb=self._answer)

    async def verify(self, within: float) -> bool:
        """Whether the server routes requests on the subject to this subscription now: asked on this
        connection after the subscription was made on it, so the server has seen the subscription
        (or refused it) before the request."""
        if self._sub is None:
            return False
        try:
            await self.bus.nc.request(self.subject, b"", timeout=within)
        except Exception as e:  # no responders (refused), a timeout, a lost connection
            log.warning("liveness subject %s does not answer: %s: %s", self.subject, type(e).__name__, e)
            return False
        return True

    async def stop(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            try:
                await sub.unsubscribe()
            except Exception as e:  # a closed connection has no subscription left anyway
                log.debug("unsubscribing %s: %s", self.subject, e)

    async def _answer(self, msg: Msg) -> None:
        if msg.reply:
            try:
                await msg.respond(b"")
            except Exception as e:  # the connection went meanwhile: the prober learns it by itself
                log.debug("answering on %s: %s", self.subject, e)
