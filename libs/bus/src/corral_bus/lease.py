"""A leader lease on a NATS KV key: one replica of a decision service issues commands at a time.

Every write is a compare-and-set on the key's revision, so two replicas can never both believe they
renewed the same lease. Expiry is judged without comparing clocks between machines:

* the holder renews every `ttl/4` and considers itself leader only while its last successful
  renewal was *sent* less than `0.7 * ttl` ago (a stalled or partitioned holder steps down alone),
  and only while the connection that renewal went over is still up (below);
* a standby polls the key; when it has seen the same revision for `0.85 * ttl` of its own clock,
  the holder has missed its renewals and stepped down, so the standby takes the key over by
  compare-and-set on that revision (only one standby can win).

Since the standby first saw a revision after it was written, the holder's own deadline
(`sent + 0.7 ttl`) always passes before the standby's (`seen + 0.85 ttl`). A holder that stops
cleanly deletes the key (compare-and-set again), and a standby takes over at its next poll.

A holder whose process died (kill -9, a crash, a node lost with its TCP connections reset) is
found sooner than that, by its connection (corral_bus.liveness): every replica answers requests on
a liveness subject of its own, and a standby that has seen a revision unchanged for longer than a
renewal period asks the holder's. "No responders" from the server the holder renewed through means
that server holds no subscription of the holder: its connection there is closed. That proves the
holder no longer leads on the revision, because

* `is_leader` is false whenever the holder's client is not connected, and after a reconnect the
  holder leads again only once a compare-and-set *sent and answered over the new connection*
  succeeds (a take, with a new term). Every renewal is likewise counted only if sent and answered
  over the connection the lease was taken on (`Bus.generation`). So the holder leads on revision
  `r` only through the connection that wrote `r`, and a compare-and-set on `r` by the standby fails
  if the holder has since re-proved its lease (that moves the revision).
* the holder writes the id of the server it renewed through into the record, and its liveness
  subject only after a request to it came back on that connection (the subscription is in place,
  and allowed). A standby trusts "no responders" only from that same server, asked and answered over
  one connection of its own: in a cluster another server knows the subscription only over a route,
  and a broken route would make a live holder look gone. Elsewhere the TTL rule alone applies.
* an answer, or no answer in time (a holder frozen by SIGSTOP or a stalled event loop, or cut off
  while the server still holds its connection), proves nothing: the TTL rule decides.

One gap is left, and fencing covers it: a server may drop a live holder's connection on its own
(a slow consumer, say), and the holder learns so only when it reads the close, a moment later;
until then its `is_leader` may still say yes while the standby has taken over. Nothing it writes
on that connection after the drop reaches anyone, and what it wrote before reached the server
before the standby's probe did. What nats-py buffers for the reconnect (publishes made while
disconnected, or not yet flushed) goes out on the new connection before the holder can have
re-proved its lease, and carries the old term: the same case as a holder paused after consulting
`is_leader`, which the actuator fences (last point below).

Why these ratios stay safe with a short TTL (decision services run 2.5 s, so that a standby leads
within `worst_failover` < 3 s of a holder that stopped answering, and within `fast_failover` < 1 s
of a holder whose connection closed) on a loaded host:

* Both deadlines are measured on each replica's own monotonic clock, never by comparing clocks
  between machines. Clock *rates* would have to differ by more than (0.85 - 0.7) / 0.85 ≈ 18 % for
  the standby's deadline to come first; NTP slews a monotonic clock by at most 0.05 %.
* Late timers only ever move things the safe way. `is_leader` is computed from the monotonic clock
  and the connection's state at every consult, not flipped by a timer, so a starved event loop that
  renews late makes the holder stop leading *earlier* (a spurious handover, never two leaders); a
  standby whose poll runs late takes over *later*. The cost of a short TTL is that a holder whose
  renewals are held up for longer than `0.7 ttl - ttl/4` (1.1 s at 2.5 s) steps down and a standby
  takes over: safe, and visible as a leadership change. Liveness probes never delay a standby's
  TTL check: none is sent that could still be waiting when the TTL deadline comes.
* What no ratio can cover is a holder paused between consulting `is_leader` and its command
  reaching the actuator. That is what fencing is for: commands carry `term`, the successor's is
  higher, and the actuator refuses the older term once it has seen the newer one; until then the
  command's field preconditions refuse a decision the cluster has moved past.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable

import msgspec
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import (
    BucketNotFoundError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
)
from nats.js.kv import KeyValue

from corral_bus.cancellation import cancel_and_wait, raise_if_cancelled
from corral_bus.connection import Bus
from corral_bus.liveness import Probe, Responder, liveness_subject, probe

log = logging.getLogger("corral.bus.lease")

LEASE_BUCKET = "corral-leases"
OnChange = Callable[[bool], Awaitable[None] | None]

_HOLDER_DEADLINE = 0.7
_TAKEOVER_AFTER = 0.85


def poll_interval(ttl: float) -> float:
    """How often a standby reads the key of a lease of `ttl`."""
    return min(1.0, max(0.05, ttl / 20))


def worst_failover(ttl: float) -> float:
    """The longest from a holder going silent (frozen, cut off, or dead where no liveness probe can
    prove it) to a standby leading, NATS round trips aside: the holder may stop just after a
    renewal, the standby may see that revision up to a poll late, then waits `0.85 ttl` of
    unchanged revision, checked at its polls."""
    return _TAKEOVER_AFTER * ttl + 2 * poll_interval(ttl)


def probe_after(ttl: float) -> float:
    """How long a standby sees a holder's revision unchanged before asking whether the holder is
    still there: a renewal period, and half a poll for the renewal's own round trip (asking a holder
    that is there costs one answered request, nothing more)."""
    return ttl / 4 + poll_interval(ttl) / 2


def fast_failover(ttl: float) -> float:
    """The longest from a holder's connection closing to a standby leading when the liveness probe
    can prove it (both on one server), NATS round trips aside: the holder may die just after a
    renewal, the standby may see that revision up to a poll late, then asks at its first poll
    `probe_after` later."""
    return probe_after(ttl) + 2 * poll_interval(ttl)


def holder_margin(ttl: float) -> float:
    """How long before the earliest possible takeover a holder has stopped leading, at least."""
    return (_TAKEOVER_AFTER - _HOLDER_DEADLINE) * ttl


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The value of a lease key: who holds it, and (for people reading the bucket) until when."""

    holder: str
    ttl: float
    renewed_at: float
    server: str = ""
    """The id of the NATS server the holder wrote this through."""
    liveness: str = ""
    """The holder's liveness subject, once it answered there on that connection (corral_bus.liveness);
    empty: standbys judge this holder by the TTL alone (an older holder writes none)."""


_decode_record = msgspec.json.Decoder(LeaseRecord).decode


class Lease:
    """Leader lease `name` for this replica (`holder`, unique per process), renewed in the background.

    `on_change(is_leader)` (sync or async) is called on every gain and loss. `is_leader` is always
    safe to consult before acting: it turns false by itself when renewals stop succeeding or the
    connection goes.
    """

    def __init__(
        self,
        bus: Bus,
        name: str,
        holder: str,
        *,
        ttl: float = 10.0,
        on_change: OnChange | None = None,
        bucket: str = LEASE_BUCKET,
        replicas: int = 1,
    ) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.bus = bus
        self.name = name
        self.holder = holder
        self.ttl = ttl
        self.bucket = bucket
        self.replicas = replicas
        self._on_change = on_change
        self._kv: KeyValue | None = None
        self._revision = 0
        self._term = 0
        self._renewed_at = 0.0  # monotonic time the last successful renewal was sent
        self._generation = -1  # the connection (Bus.generation) the lease was taken over
        self._answering = False  # the liveness subject answered on that connection
        self._leader = False
        self._responder = Responder(bus, liveness_subject(name, holder))
        self._wake = asyncio.Event()  # set on a disconnect: step down now, not at the next renewal
        self._silent_revision = -1  # a revision whose holder did not answer its probe: TTL rule
        self._task: asyncio.Task[None] | None = None
        # What a standby has seen: the revision and when it first saw it (monotonic).
        self._seen_revision = -1
        self._seen_at = 0.0
        self.changed = asyncio.Event()
        """Set on every change of leadership (cleared by whoever waits on it)."""

    @property
    def is_leader(self) -> bool:
        return (
            self._leader
            and self.bus.is_connected
            and self.bus.generation == self._generation
            and time.monotonic() - self._renewed_at < _HOLDER_DEADLINE * self.ttl
        )

    @property
    def revision(self) -> int:
        """The key's revision this replica last wrote (grows with every renewal)."""
        return self._revision

    @property
    def term(self) -> int:
        """The key's revision when this replica took the lease (0: never led). KV revisions only
        grow, so a later leader always has a higher term: commands carry it, and the actuator
        refuses those of a leader older than the newest it has seen (fencing)."""
        return self._term

    @property
    def renew_every(self) -> float:
        return self.ttl / 4

    @property
    def poll_every(self) -> float:
        return poll_interval(self.ttl)

    @property
    def worst_failover(self) -> float:
        return worst_failover(self.ttl)

    @property
    def liveness_subject(self) -> str:
        return self._responder.subject

    async def start(self) -> None:
        """Open the bucket, make a first attempt at the lease, and keep at it in the background."""
        self._kv = await open_bucket(self.bus, self.bucket, self.replicas)
        self.bus.disconnect_listeners.append(self._wake.set)
        try:
            await self._responder.start()
        except Exception as e:  # then takes write no liveness subject: standbys keep to the TTL
            log.warning("lease %s: no liveness subject: %s: %s", self.name, type(e).__name__, e)
        try:
            await self._step()
        except Exception as e:  # the background loop keeps trying
            log.warning("lease %s: first attempt failed: %s: %s", self.name, type(e).__name__, e)
        self._task = asyncio.create_task(self._run(), name=f"lease-{self.name}")

    async def stop(self, *, release: bool = True) -> None:
        """Stop renewing; with `release` (the normal case) hand the lease back at once.

        `release=False` leaves the key as a crash would: a standby takes it over once its probe finds
        this replica's liveness subject gone (it is withdrawn here, after stepping down), or after
        the TTL where it cannot ask.
        """
        task, self._task = self._task, None
        await cancel_and_wait(task)
        with contextlib.suppress(ValueError):
            self.bus.disconnect_listeners.remove(self._wake.set)
        if self._leader and release and self._kv is not None:
            try:
                await asyncio.wait_for(self._kv.delete(self.name, last=self._revision), self.ttl / 4)
            except Exception as e:  # lost already, or NATS is gone: the TTL will do it
                log.info("lease %s: release failed (%s); it expires by itself", self.name, e)
        await self._set_leader(False)
        # Only now: no longer leading, it may look gone to a standby.
        await self._responder.stop()

    async def _run(self) -> None:
        while True:
            await self._pause(self.renew_every if self._leader else self.poll_every)
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except NoStreamResponseError:
                raise_if_cancelled()
                # The bucket is gone (deleted, or a server that lost its store): make it again.
                log.warning("lease %s: bucket %s missing; re-creating it", self.name, self.bucket)
                with contextlib.suppress(Exception):
                    self._kv = await open_bucket(self.bus, self.bucket, self.replicas)
            except Exception as e:
                raise_if_cancelled()  # a stop that nats-py answered with its own error (cancellation.py)
                log.warning("lease %s: %s: %s", self.name, type(e).__name__, e)
            # _renew takes nats-py's answer to a cancel for a failed renewal and returns as usual
            raise_if_cancelled()
            if self._leader and not self.is_leader:
                await self._set_leader(False)

    async def _pause(self, seconds: float) -> None:
        """Sleep `seconds`, or less when the connection goes meanwhile."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), seconds)
        self._wake.clear()

    async def _step(self) -> None:
        if self._leader:
            await self._renew()
        else:
            await self._try_acquire()

    def _record(self, answering: bool) -> bytes:
        record = LeaseRecord(
            holder=self.holder,
            ttl=self.ttl,
            renewed_at=time.time(),
            server=self.bus.server_id,
            liveness=self._responder.subject if answering else "",
        )
        return msgspec.json.encode(record)

    def _same_connection(self, generation: int) -> bool:
        """Whether this client is still on the connection `generation`, connected."""
        return self.bus.is_connected and self.bus.generation == generation

    async def _renew(self) -> None:
        assert self._kv is not None
        generation = self._generation
        if not self._same_connection(generation):
            return  # a new connection: the lease is re-proved by a take (_try_acquire), not renewed
        sent = time.monotonic()
        try:
            self._revision = await asyncio.wait_for(
                self._kv.update(self.name, self._record(self._answering), last=self._revision),
                self.renew_every,
            )
        except KeyWrongLastSequenceError:
            if await self._still_ours():
                return  # an earlier renewal did land after its timeout; renew from there next time
            log.warning("lease %s: taken over by another holder", self.name)
            await self._set_leader(False)
            return
        except Exception as e:  # timeout, disconnected, JetStream unavailable
            if not self.is_leader:
                log.warning("lease %s: could not renew within its deadline: %s", self.name, e)
                await self._set_leader(False)
            return
        if self._same_connection(generation):  # else answered over a later connection: proves nothing
            self._renewed_at = sent

    async def _still_ours(self) -> bool:
        """After a refused renewal: is the key still ours (our own late write moved the revision)?"""
        assert self._kv is not None
        try:
            entry = await self._kv.get(self.name)
        except Exception:
            return False
        record = _read(entry.value)
        if record is None or record.holder != self.holder:
            return False
        self._revision = entry.revision or 0
        return True

    async def _try_acquire(self) -> None:
        assert self._kv is not None
        if not self.bus.is_connected:
            return  # a request now would go out after the reconnect, stale
        sent = time.monotonic()
        try:
            entry = await self._kv.get(self.name)
        except KeyNotFoundError:  # never held, released, or deleted: free to take
            await self._take(sent, create=True)
            return
        record = _read(entry.value)
        revision = entry.revision or 0
        if record is not None and record.holder == self.holder:
            # Our own key from before a restart of this process, or from before a reconnect: ours
            # to continue, by a compare-and-set over this connection (a new term).
            await self._take(sent, last=revision)
            return
        now = time.monotonic()
        if revision != self._seen_revision:
            self._seen_revision, self._seen_at = revision, now
            return
        holder_ttl = record.ttl if record is not None else self.ttl
        if now - self._seen_at >= _TAKEOVER_AFTER * holder_ttl:
            log.info("lease %s: holder %s stopped renewing; taking over", self.name, record and record.holder)
            await self._take(sent, last=revision)
        elif record is not None and await self._holder_gone(record, revision, now - self._seen_at):
            log.info("lease %s: holder %s's connection is gone; taking over", self.name, record.holder)
            await self._take(sent, last=revision)

    async def _holder_gone(self, record: LeaseRecord, revision: int, unchanged_for: float) -> bool:
        """Whether the liveness probe proves the holder of `revision` gone (corral_bus.liveness).

        Asked once the revision is older than a renewal period, at every poll until the holder
        answers nothing in time (then the TTL rule alone decides for this revision), and never so
        late that the probe could still be waiting when the TTL deadline comes."""
        subject = liveness_subject(self.name, record.holder)
        timeout = self.poll_every
        if record.liveness != subject or revision == self._silent_revision:
            return False
        if not probe_after(record.ttl) <= unchanged_for < _TAKEOVER_AFTER * record.ttl - timeout:
            return False
        outcome = await probe(self.bus, subject, record.server, timeout)
        if outcome is Probe.SILENT:
            log.info("lease %s: holder %s does not answer; waiting for its TTL", self.name, record.holder)
            self._silent_revision = revision
        return outcome is Probe.GONE

    async def _take(self, sent: float, *, create: bool = False, last: int = 0) -> None:
        assert self._kv is not None
        generation = self.bus.generation
        if not self._same_connection(generation):
            return
        # Once per take, so after every reconnect: the answer proves the subscription is in place
        # on this connection before the record says so.
        answering = await self._responder.verify(self.poll_every)
        try:
            if create:
                self._revision = await self._kv.create(self.name, self._record(answering))
            else:
                self._revision = await self._kv.update(self.name, self._record(answering), last=last)
        except (KeyWrongLastSequenceError, KeyNotFoundError):
            self._seen_revision = -1  # someone else was quicker; watch the new holder
            return
        if not self._same_connection(generation):
            self._seen_revision = -1  # answered over a later connection: the next poll takes again
            return
        self._renewed_at = sent
        self._generation = generation
        self._answering = answering
        self._term = self._revision
        await self._set_leader(True)

    async def _set_leader(self, leader: bool) -> None:
        if leader == self._leader:
            return
        self._leader = leader
        self._seen_revision = -1
        log.info("lease %s: %s is %s", self.name, self.holder, "leader" if leader else "standby")
        self.changed.set()
        if self._on_change is not None:
            try:
                outcome = self._on_change(leader)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("lease %s: on_change callback failed", self.name)


def _read(value: bytes | None) -> LeaseRecord | None:
    try:
        return _decode_record(value or b"")
    except Exception:  # any bad bytes (invalid UTF-8 too): no readable lease record
        return None


async def open_bucket(bus: Bus, bucket: str = LEASE_BUCKET, replicas: int = 1) -> KeyValue:
    """The lease bucket, created on first use (one revision per key is all a lease needs), with as
    many copies as the streams (`replicas`: 3 on a 3-server cluster, so a lease survives the loss of
    the server that led the bucket)."""
    try:
        return await bus.js.key_value(bucket)
    except BucketNotFoundError:
        return await bus.js.create_key_value(
            KeyValueConfig(
                bucket=bucket,
                history=1,
                storage=StorageType.FILE,
                replicas=replicas,
                description="leader leases",
            )
        )
