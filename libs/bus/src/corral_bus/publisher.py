"""Publishing into JetStream with pipelined acknowledgements, each message on its own.

The pipelining (a bounded window of messages in flight, every ack matched and checked) is the
shared core in `corral_bus.acks`. What this publisher adds is its answer to a message that was not
stored: a missing ack (lost in a reconnect) or a "JetStream unavailable" answer has the message
re-sent with the same `Nats-Msg-Id` (so the stream stores it once) until `give_up_after`; any other
refusal, and whatever was given up, is reported by `flush`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.trace import get_current_span

from corral_bus import framing
from corral_bus.acks import AckPipeline, Pending
from corral_bus.connection import Bus
from corral_bus.errors import PublishError, PublishFailure
from corral_bus.streams import TTL_HEADER
from corral_bus.tracing import inject_trace

log = logging.getLogger("corral.bus.publisher")


class Publisher(AckPipeline):
    """Pipelined, acknowledged, deduplicated publishing into JetStream.

    `await publish(...)` is fast while fewer than `window` messages await their ack;
    `await flush()` waits until every message sent so far is acknowledged and raises `PublishError`
    listing those that were not. A duplicate ack (the stream already had that `Nats-Msg-Id`) is a
    success. Safe to share between tasks of one event loop.

    Order: messages are stored in publish order unless one has to be re-sent (its ack was lost in
    a reconnect, or JetStream answered "unavailable"); a re-sent message can then land after later
    ones, of its own subject too. Where the newest message per subject must be the object's current
    state (the watcher into LH_OBJECTS), use a publisher that chains each subject's messages with
    the expected last subject sequence instead (corral_watcher.publishing.OrderedPublisher).
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
        super().__init__(bus, window=window, ack_timeout=ack_timeout, check_every=min(0.1, ack_timeout / 4))
        self._give_up_after = give_up_after
        self._trace = trace
        self._failures: list[PublishFailure] = []
        self._seen_reconnects = bus.reconnects
        # Only messages that needed more than one send have an entry (by token).
        self._attempts: dict[int, _Attempts] = {}
        self._retry_scheduled = False

    @property
    def published(self) -> int:
        """Messages the stream acknowledged, duplicates included."""
        return self.stored

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
        A message that cannot be sent at all (closed connection, oversized payload, bad subject,
        message id or header name) raises here and is not left in flight.
        """
        framing.check(subject, msg_id or "")
        hdrs: dict[str, str] | None = dict(headers) if headers else None
        if ttl is not None:
            hdrs = hdrs or {}
            hdrs[TTL_HEADER] = f"{max(1, round(ttl))}s"
        if self._trace and get_current_span().get_span_context().is_valid:
            hdrs = hdrs or {}
            inject_trace(hdrs)
        await self._submit(subject, payload, msg_id or "", hdrs)

    def _attempts_of(self, token: int, item: Pending) -> _Attempts:
        attempts = self._attempts.get(token)
        if attempts is None:
            attempts = self._attempts[token] = _Attempts(first_sent=item.sent_at)
        return attempts

    def _after_store(self, token: int, item: Pending, ack: bytes) -> None:
        if self._attempts:
            self._attempts.pop(token, None)

    def _refused(self, token: int, item: Pending, error: str, *, retryable: bool, err_code: int) -> None:
        if not retryable:
            self._fail(token, item, error)
            return
        # No responders, or JetStream (re)starting: re-send after a short, growing delay.
        attempts = self._attempts_of(token, item)
        attempts.last_error = error
        attempts.retry_at = time.monotonic() + min(self._ack_timeout, 0.05 * 2**attempts.retries)
        attempts.retries += 1
        self._retry_scheduled = True

    def _fail(self, token: int, item: Pending, error: str) -> None:
        log.warning("publish to %s [%s] failed: %s", item.subject, item.msg_id, error)
        self._failures.append(PublishFailure(item.subject, item.msg_id, error))
        self._attempts.pop(token, None)
        self._forget(token)

    async def _check(self, urgent: bool) -> None:
        """Re-send what is overdue (ack lost in a reconnect, retry due); give up after a while."""
        now = time.monotonic()
        bus, pending, attempts = self._bus, self._pending, self._attempts
        if bus.reconnects != self._seen_reconnects and bus.nc.is_connected:
            # Reconnected: what was written before the disconnect may be lost; re-send it now
            # rather than after its ack timeout (a duplicate is dropped by its Nats-Msg-Id).
            self._seen_reconnects = bus.reconnects
            for token, item in pending.items():
                if item.sent_at <= bus.disconnected_at:
                    self._attempts_of(token, item).retry_at = now
            self._retry_scheduled = True
        elif not self._retry_scheduled:
            token, oldest = next(iter(pending.items()))
            first_sent = attempts[token].first_sent if token in attempts else oldest.sent_at
            if first_sent + self._ack_timeout > now:
                return  # every message was first sent after it: nothing can be overdue yet
        nc = bus.nc
        retries_left = False
        self._retry_scheduled = False  # a refusal while re-sending below sets it again
        for token, item in list(pending.items()):
            if token not in pending:
                continue
            if nc.is_closed:
                self._fail(token, item, "connection closed before the ack came")
                continue
            tried = attempts.get(token)
            if now - (tried.first_sent if tried else item.sent_at) >= self._give_up_after:
                why = f"not stored within {self._give_up_after:g}s"
                self._fail(token, item, f"{why}: {tried.last_error}" if tried and tried.last_error else why)
                continue
            due = tried.retry_at if tried and tried.retry_at else item.sent_at + self._ack_timeout
            if due > now or not nc.is_connected:
                retries_left = retries_left or bool(tried and tried.retry_at)
                continue
            tried = self._attempts_of(token, item)
            tried.retry_at = 0.0
            log.debug("re-sending %s [%s]: %s", item.subject, item.msg_id, tried.last_error or "ack overdue")
            if not await self._rewrite(token, item):
                retries_left = True
                break  # disconnected meanwhile: the next round tries again
        if retries_left:
            self._retry_scheduled = True

    async def flush(self) -> None:
        """Wait until every message published so far is acknowledged or given up (`give_up_after`).

        Raises `PublishError` listing the messages that were not stored, and forgets them.
        Bound the wait with `asyncio.timeout` if needed.
        """
        await super().flush()
        if self._failures:
            failures, self._failures = self._failures, []
            raise PublishError(failures)


@dataclass(slots=True)
class _Attempts:
    """What the publisher remembers of a message sent more than once, or refused for now."""

    first_sent: float
    retry_at: float = 0.0
    """When it is due again (0: after its ack timeout)."""
    retries: int = 0
    last_error: str = ""
