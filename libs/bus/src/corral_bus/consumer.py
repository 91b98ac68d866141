"""Durable pull consumers: fetch in bounded batches, hand each message to a handler, ack by outcome.

The handler's way of returning decides the message's fate:

* returns: ack.
* raises `TransientError` (or anything unexpected): nak with the next delay of the backoff list,
  so JetStream redelivers it later; on the last allowed delivery it is dead-lettered instead.
* raises `PermanentError` or `SchemaError` (cannot decode): the message goes to LH_DEAD with the
  reason, then is acked. The consumer keeps going; a poison message never stops a service.

A handler that dies mid-way (process killed) leaves its message unacked: JetStream redelivers it
after `ack_wait`; when that exhausts `max_deliver`, the server's MAX_DELIVERIES advisory makes the
consumer dead-letter it too. The server sends that advisory once, as a core NATS message, so it
would be lost when no replica is listening (the last one just died: that is how deliveries run
out); the LH_ADVISORIES stream keeps it, and the consumer reads it from there through a durable
consumer of its own (same name), so a replica started later still parks the message. (Without
that stream, e.g. a server set up before it existed, the consumer listens to the core advisory as
before.) Long handlers are kept alive with in-progress acks automatically.

`ConsumerSpec.concurrency` runs that many handlers at once, each on its own message, from the one
pull feed: what each message's handler does decides its fate exactly as above. One feed instead of
one consumer object per handler matters when idle: every feed keeps a pull request open with
heartbeats, reads advisories and checks its consumer, and 32 of them cost an idle actuator about
5 % of a core (and NATS as much again) before any command arrived.

The server-side consumer is (re)created idempotently at start, after every reconnect and whenever
it turns out to be gone, so deleting it or restarting a memory-backed server heals by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import ConnectionClosedError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy
from nats.js.errors import BadRequestError, NotFoundError
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context

from corral_bus.cancellation import cancel_and_wait
from corral_bus.connection import Bus
from corral_bus.deadletter import DeadReason, dead_letter, publish_dead_letter
from corral_bus.delivery import Delivery
from corral_bus.errors import PermanentError, TransientError
from corral_bus.permissions import advisory_consumer
from corral_bus.pull import PullFeed, ack_metadata
from corral_bus.tracing import TRACEPARENT, extract_trace
from corral_model import subjects
from corral_model.codec import SchemaError

log = logging.getLogger("corral.bus.consumer")
_tracer = trace.get_tracer("corral_bus")

Handler = Callable[[Delivery], Awaitable[None]]
_NO_TRACE = Context()


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer and how hard it tries."""

    stream: str
    durable: str
    filter_subjects: tuple[str, ...] = ()
    backoff: tuple[float, ...] = (1.0, 5.0, 30.0)
    """Delay before redelivery after the n-th transient failure (the last one repeats). Applied as
    the nak's delay, not as the server's BackOff, which would also replace `ack_wait` and hand a
    slow handler's message to another replica after the first (short) step."""
    max_deliver: int = 5
    ack_wait: float = 30.0
    """How long an unacked delivery is given before JetStream redelivers it (a crashed handler)."""
    max_ack_pending: int = 256
    batch: int = 64
    fetch_wait: float = 1.0
    """How often an idle consumer looks up from waiting (to notice `stop` and a vanished consumer)."""
    pull_expires: float = 1.0
    """Lifetime of one pull request on the server; bounds how long `stop` waits for stragglers."""
    handler_timeout: float | None = 300.0
    """A handler still running after this long is cancelled and its message retried (None: never)."""
    deliver_policy: DeliverPolicy = DeliverPolicy.ALL
    description: str = ""
    process_span: bool = True
    """A traced message is handled under a consumer span of its own; False when the handler makes
    its own span (the actuator's), which is then the publisher's child rather than a grandchild."""
    concurrency: int = 1
    """Handlers running at once, each on its own message. Order across messages is then not kept
    (as with several consumers on one durable); keep `batch` at least this large."""

    def delay_after(self, num_delivered: int) -> float:
        if not self.backoff:
            return 0.0
        return self.backoff[min(num_delivered, len(self.backoff)) - 1]

    def consumer_config(self) -> ConsumerConfig:
        filters = list(self.filter_subjects)
        return ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            description=self.description or None,
            deliver_policy=self.deliver_policy,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
            filter_subject=filters[0] if len(filters) == 1 else None,
            filter_subjects=filters if len(filters) > 1 else None,
        )


@dataclass(slots=True)
class ConsumerStats:
    acked: int = 0
    redelivering: int = 0
    dead_lettered: int = 0
    rebinds: int = 0
    in_flight: dict[int, tuple[Msg, float]] = field(default_factory=dict)


class Consumer:
    """Runs `handler` for every message of a durable pull consumer until `stop()`.

    ::

        spec = ConsumerSpec(stream="LH_COMMANDS_ENGINE_UPGRADE", durable="actuator")
        consumer = Consumer(bus, spec, handle)
        consumer.start()
        ...
        await consumer.stop()
    """

    def __init__(self, bus: Bus, spec: ConsumerSpec, handler: Handler) -> None:
        if spec.backoff and spec.max_deliver > 0 and spec.max_deliver <= 1:
            raise ValueError("max_deliver must allow at least one redelivery when a backoff is set")
        if spec.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.bus = bus
        self.spec = spec
        self.handler = handler
        self.stats = ConsumerStats()
        self._feed: PullFeed | None = None
        self._bound_at_reconnects = -1
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._keepalive: asyncio.Task[None] | None = None
        self._advisories: Subscription | None = None
        self._advisory_task: asyncio.Task[None] | None = None
        self._work_queue = False
        # With concurrency > 1: the handlers running now, and a signal when one ends.
        self._handlers: set[asyncio.Task[None]] = set()
        self._handler_done = asyncio.Event()
        self.ready = asyncio.Event()
        """Set once the server-side consumer exists and fetching has begun."""

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.create_task(self.run(), name=f"consumer-{self.spec.durable}")
        return self._task

    async def stop(self, grace: float = 10.0) -> None:
        """Stop fetching, let the message in hand finish (nak it after `grace`), and return."""
        self._stopping.set()
        if self._task is not None:
            try:
                wait = grace + self.spec.fetch_wait + self.spec.pull_expires + 1
                await asyncio.wait_for(asyncio.shield(self._task), timeout=wait)
            except TimeoutError:
                await cancel_and_wait(self._task)
            self._task = None

    async def run(self) -> None:
        self._keepalive = asyncio.create_task(self._keep_alive(), name=f"keepalive-{self.spec.durable}")
        self._advisory_task = asyncio.create_task(
            self._advisory_loop(), name=f"advisories-{self.spec.durable}"
        )
        try:
            await self._loop()
            while self._handlers:  # stopping: let the handlers running now finish their messages
                await asyncio.wait(set(self._handlers))
        finally:
            # Whatever ended the loop ends the helpers: they also look at `_stopping`, because a
            # cancellation that lands inside nats-py's fetch can come out as its TimeoutError, and a
            # helper that took it for an empty fetch would go on forever (a hung stop).
            self._stopping.set()
            # Handlers still running here were cancelled with the loop (stop's grace ran out): each
            # naks its message, so it comes again at once.
            for handler in self._handlers:
                handler.cancel()
            if self._handlers:
                await asyncio.gather(*self._handlers, return_exceptions=True)
            await cancel_and_wait(self._keepalive, self._advisory_task)
            await self._unbind()

    # -- binding -----------------------------------------------------------------------------------

    async def _bind(self) -> None:
        """Create or update the durable consumer and start pulling from it."""
        await self._unbind()
        js = self.bus.js
        info = await js.stream_info(self.spec.stream)
        self._work_queue = info.config.retention == RetentionPolicy.WORK_QUEUE
        await js.add_consumer(self.spec.stream, self.spec.consumer_config())
        feed = PullFeed(
            self.bus,
            self.spec.stream,
            self.spec.durable,
            batch=self.spec.batch,
            expires=self.spec.pull_expires,
            heartbeat=self.spec.pull_expires * 0.45,
        )
        await feed.start()
        self._feed = feed
        self._bound_at_reconnects = self.bus.reconnects
        self.stats.rebinds += 1
        self.ready.set()

    async def _unbind(self) -> None:
        feed, self._feed = self._feed, None
        if feed is not None:
            await feed.close()
            if self.bus.nc.is_connected:
                for msg in feed.give_back():  # received, not handled: let them come again now
                    with contextlib.suppress(Exception):
                        await msg.nak()

    async def _consumer_exists(self) -> bool:
        try:
            await self.bus.js.consumer_info(self.spec.stream, self.spec.durable)
            return True
        except NotFoundError:
            return False

    def _needs_bind(self) -> bool:
        feed = self._feed
        return feed is None or feed.consumer_deleted or self._bound_at_reconnects != self.bus.reconnects

    # -- the loop ----------------------------------------------------------------------------------

    async def _loop(self) -> None:
        retry = 0.1
        idle_since = time.monotonic()
        while not self._stopping.is_set():
            try:
                if self._needs_bind():
                    await self._bind()
                    retry = 0.1
                feed = self._feed
                assert feed is not None
                if len(self._handlers) >= self.spec.concurrency:
                    await self._slot_freed()
                    continue
                msg = await feed.next(self.spec.fetch_wait)
                if msg is not None:
                    idle_since = time.monotonic()
                    if self.spec.concurrency == 1:
                        await self._handle(msg)
                    else:
                        self._spawn(msg)
                    continue
                if feed.stale:
                    # Requests outstanding and not even a heartbeat: they died with the server.
                    log.info("consumer %s: pull went quiet; re-binding", self.spec.durable)
                    await self._unbind()
                elif time.monotonic() - idle_since > 5 * self.spec.fetch_wait:
                    idle_since = time.monotonic()
                    if not await self._consumer_exists():
                        log.warning("consumer %s vanished; re-creating it", self.spec.durable)
                        await self._unbind()
            except asyncio.CancelledError:
                raise
            except ConnectionClosedError:
                log.info("consumer %s: connection closed, stopping", self.spec.durable)
                return
            except Exception as e:
                # Server restarting, consumer deleted, JetStream briefly unavailable: re-bind.
                log.warning("consumer %s: %s: %s; re-binding", self.spec.durable, type(e).__name__, e)
                with contextlib.suppress(Exception):
                    await self._unbind()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=retry)
                retry = min(retry * 2, 5.0)
        await self._give_back()

    def _spawn(self, msg: Msg) -> None:
        """Handle `msg` beside the handlers already running (concurrency > 1)."""
        task = asyncio.create_task(self._handle(msg), name=f"handler-{self.spec.durable}")
        self._handlers.add(task)
        task.add_done_callback(self._handler_ended)

    def _handler_ended(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        self._handler_done.set()
        if not task.cancelled() and (error := task.exception()) is not None:
            # The handler's own failures became a nak or a dead letter; this is the ack or nak
            # itself failing (connection lost): the message comes again after ack_wait.
            what = f"{type(error).__name__}: {error}"
            log.warning("consumer %s: settling a message failed: %s", self.spec.durable, what)

    async def _slot_freed(self) -> None:
        """Wait until fewer than `concurrency` handlers run (or a while: the loop looks up)."""
        self._handler_done.clear()
        if len(self._handlers) >= self.spec.concurrency:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.spec.fetch_wait):
                    await self._handler_done.wait()

    async def _give_back(self) -> None:
        """On stop: nak what was received but not handled, including what arrives for pulls still
        open, so another replica gets it now rather than after `ack_wait`."""
        feed = self._feed
        if feed is None or not self.bus.nc.is_connected:
            return
        deadline = time.monotonic() + self.spec.pull_expires + 0.5
        while True:
            for msg in feed.give_back():
                with contextlib.suppress(Exception):
                    await msg.nak()
            if not feed.outstanding or time.monotonic() > deadline or feed.stale:
                return
            await feed.wait_arrival(0.1)

    def _delivery(self, msg: Msg) -> Delivery:
        stream, num_delivered, stream_seq, num_pending = ack_metadata(msg.reply)
        headers = msg.headers or {}
        return Delivery(
            data=msg.data,
            subject=msg.subject,
            headers=headers,
            num_delivered=num_delivered,
            max_deliver=self.spec.max_deliver,
            stream=stream,
            stream_seq=stream_seq,
            num_pending=num_pending,
            trace_context=extract_trace(headers) if TRACEPARENT in headers else _NO_TRACE,
            msg=msg,
        )

    async def _handle(self, msg: Msg) -> None:
        delivery = self._delivery(msg)
        self.stats.in_flight[delivery.stream_seq] = (msg, time.monotonic())
        try:
            if delivery.trace_context is _NO_TRACE:
                await self._run_handler(delivery)
                return
            # Traced message: the handler runs in the publisher's trace, under a consumer span.
            token = otel_context.attach(delivery.trace_context)
            try:
                if not self.spec.process_span:
                    await self._run_handler(delivery)
                    return
                with _tracer.start_as_current_span(
                    f"{self.spec.durable} process", kind=trace.SpanKind.CONSUMER
                ) as span:
                    span.set_attribute("messaging.destination.name", delivery.subject)
                    span.set_attribute("messaging.message.delivery_count", delivery.num_delivered)
                    await self._run_handler(delivery)
            finally:
                otel_context.detach(token)
        finally:
            self.stats.in_flight.pop(delivery.stream_seq, None)

    async def _run_handler(self, delivery: Delivery) -> None:
        deadline = asyncio.timeout(self.spec.handler_timeout)
        try:
            async with deadline:
                await self.handler(delivery)
        except TimeoutError as e:
            error: Exception = e
            if deadline.expired():
                error = TransientError(f"handler did not finish within {self.spec.handler_timeout:g}s")
            await self._retry_later(delivery, error)
            return
        except (SchemaError, PermanentError) as e:
            reason = DeadReason.UNDECODABLE if isinstance(e, SchemaError) else DeadReason.PERMANENT
            await self._dead_letter(delivery, reason, str(e) or type(e).__name__)
            return
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await delivery.msg.nak()
            raise
        except Exception as e:
            await self._retry_later(delivery, e)
            return
        await delivery.msg.ack()
        self.stats.acked += 1

    async def _retry_later(self, delivery: Delivery, error: Exception) -> None:
        what = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        if delivery.is_last_attempt:
            await self._dead_letter(
                delivery,
                DeadReason.MAX_DELIVERIES,
                f"failed {delivery.num_delivered} deliveries; last: {what}",
            )
            return
        if not isinstance(error, TransientError):
            log.exception("consumer %s: handler failed on %s", self.spec.durable, delivery.subject)
        delay = error.delay if isinstance(error, TransientError) and error.delay is not None else None
        if delay is None:
            delay = self.spec.delay_after(delivery.num_delivered)
        await delivery.msg.nak(delay=delay)
        self.stats.redelivering += 1

    async def _dead_letter(self, delivery: Delivery, reason_class: DeadReason, reason: str) -> None:
        letter = dead_letter(
            reason_class=reason_class,
            reason=reason,
            stream=delivery.stream,
            subject=delivery.subject,
            consumer=self.spec.durable,
            deliveries=delivery.num_delivered,
            headers=delivery.headers,
            data=delivery.data,
        )
        try:
            await publish_dead_letter(self.bus.js, letter, reason_class, delivery.stream_seq)
        except Exception as e:
            # Not parked, so not acked either: it comes back and is tried again.
            log.error("consumer %s: could not dead-letter %s: %s", self.spec.durable, delivery.subject, e)
            await delivery.msg.nak(delay=self.spec.delay_after(1))
            return
        log.warning("consumer %s: dead-lettered %s: %s", self.spec.durable, delivery.subject, letter.reason)
        await delivery.msg.ack()
        self.stats.dead_lettered += 1

    # -- max-deliveries advisories ----------------------------------------------------------------

    @property
    def advisory_subject(self) -> str:
        return f"{subjects.MAX_DELIVERIES_ADVISORY_PREFIX}.{self.spec.stream}.{self.spec.durable}"

    async def _advisory_loop(self) -> None:
        """Park every message the advisories say exhausted its deliveries, from LH_ADVISORIES (or,
        where that stream does not exist, from the core advisory subject)."""
        retry = 0.5
        while not self._stopping.is_set():
            try:
                await self._read_advisories()
                return
            except asyncio.CancelledError:
                raise
            except ConnectionClosedError:
                return
            except Exception as e:
                log.warning("consumer %s: advisories: %s: %s; again", self.spec.durable, type(e).__name__, e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=retry)
            retry = min(retry * 2, 5.0)

    async def _read_advisories(self) -> None:
        js = self.bus.js
        advisory_durable = advisory_consumer(self.spec.stream, self.spec.durable)
        config = ConsumerConfig(
            name=advisory_durable,
            durable_name=advisory_durable,
            description=f"max-deliveries advisories of {self.spec.stream}/{self.spec.durable}",
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=30.0,
            filter_subject=self.advisory_subject,
        )
        try:
            await js.add_consumer(subjects.ADVISORIES_STREAM, config)
        except NotFoundError:
            log.warning(
                "consumer %s: no %s stream (run `corral bus init`); listening to the core advisory only",
                self.spec.durable,
                subjects.ADVISORIES_STREAM,
            )
            self._advisories = await self.bus.nc.subscribe(self.advisory_subject, cb=self._on_max_deliveries)
            try:
                await self._stopping.wait()
            finally:
                with contextlib.suppress(Exception):
                    await self._advisories.unsubscribe()
                self._advisories = None
            return
        pull = await js.pull_subscribe_bind(advisory_durable, subjects.ADVISORIES_STREAM)
        bound_at = self.bus.reconnects
        try:
            while not self._stopping.is_set():
                if bound_at != self.bus.reconnects:
                    # The server may have lost a memory consumer; add_consumer is idempotent.
                    await js.add_consumer(subjects.ADVISORIES_STREAM, config)
                    bound_at = self.bus.reconnects
                try:
                    messages = await pull.fetch(16, timeout=self.spec.fetch_wait)
                except (NatsTimeoutError, TimeoutError):
                    # nats-py's batch fetch ends an idle wait with either, depending on when the
                    # deadline passes; both only mean "no advisory yet".
                    continue
                for message in messages:
                    if await self._park(message.data):
                        await message.ack()
                    else:
                        await message.nak(delay=self.spec.delay_after(1) or 1.0)
        finally:
            with contextlib.suppress(Exception):
                await pull.unsubscribe()

    async def _on_max_deliveries(self, advisory: Msg) -> None:
        await self._park(advisory.data)

    async def _park(self, advisory: bytes) -> bool:
        """A delivery the handler never finished (crash, hang) exhausted `max_deliver`: park it.
        True when done with the advisory (parked, or nothing left to park)."""
        try:
            body = json.loads(advisory)
            seq = int(body["stream_seq"])
            deliveries = int(body.get("deliveries", self.spec.max_deliver))
        except Exception as e:
            log.warning("consumer %s: unreadable max-deliveries advisory: %s", self.spec.durable, e)
            return True
        try:
            stored = await self.bus.js.get_msg(self.spec.stream, seq)
        except NotFoundError:
            return True  # parked already (by another replica), or gone with its stream's limits
        except Exception as e:
            log.warning("consumer %s: cannot read seq %d to park it: %s", self.spec.durable, seq, e)
            return False
        letter = dead_letter(
            reason_class=DeadReason.MAX_DELIVERIES,
            reason=f"not acknowledged after {deliveries} deliveries (handler crashed or hung)",
            stream=self.spec.stream,
            subject=stored.subject or "",
            consumer=self.spec.durable,
            deliveries=deliveries,
            headers=stored.headers,
            data=stored.data or b"",
        )
        try:
            await publish_dead_letter(self.bus.js, letter, DeadReason.MAX_DELIVERIES, seq)
            if self._work_queue:
                # A work queue would keep the message forever; it lives on in LH_DEAD. (Another
                # replica of this consumer may have removed it already.)
                with contextlib.suppress(NotFoundError, BadRequestError):
                    await self.bus.js.delete_msg(self.spec.stream, seq)
            self.stats.dead_lettered += 1
            log.warning("consumer %s: dead-lettered %s: %s", self.spec.durable, letter.subject, letter.reason)
        except Exception as e:
            log.error("consumer %s: could not dead-letter seq %d: %s", self.spec.durable, seq, e)
            return False
        return True

    async def _keep_alive(self) -> None:
        """Send in-progress acks for deliveries that are taking long: handlers running for more than
        a third of `ack_wait`, and messages waiting that long behind a slow handler, so JetStream
        does not hand them to another replica while they are still ours."""
        period = max(0.1, self.spec.ack_wait / 3)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            slow = [msg for msg, started in self.stats.in_flight.values() if now - started >= period]
            if self._feed is not None:
                slow.extend(self._feed.waiting_since(now - period))
            for msg in slow:
                with contextlib.suppress(Exception):
                    await msg.in_progress()
