"""Pipelined publishing into LH_OBJECTS that never reorders one object's events.

The pipelining itself (window, framing, ack matching) is the bus library's shared core,
`corral_bus.acks.AckPipeline`. What the watcher needs differently is recovery. The bus library's
`Publisher` re-sends a message whose ack is overdue on its own. For the watcher that can store an
object's events out of order: when NATS restarts, the message that was on the wire (k) is lost while
the next one of the same object (k+1), buffered during the disconnect, is stored after the
reconnect; re-sending k then stores an older state after a newer one, and the last message of the
subject is no longer the object's current state.

So this publisher recovers differently. When a message is known lost (a later one is acknowledged:
JetStream answers in order), when no ack at all arrived for `ack_timeout`, or when an ack reports an
error, the whole unacknowledged window is collapsed to the newest message per subject, leaving out
subjects whose newer message is already acknowledged, and those are re-sent in order, with the same
`Nats-Msg-Id`, until stored. An intermediate state of an object may be skipped in the history that
way, but the newest one is never overtaken by an older one, and nothing is ever given up while the
process lives (the watch behind it cannot be rewound, so dropping an event would lose it for good).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from corral_bus import Bus
from corral_bus.acks import AckPipeline, Pending
from corral_watcher.events import Message

log = logging.getLogger("corral.watcher.publishing")


class OrderedPublisher(AckPipeline):
    """Publishes with pipelined acks; per subject, stored order always equals publish order."""

    def __init__(self, bus: Bus, *, window: int = 8192, ack_timeout: float = 2.0) -> None:
        super().__init__(
            bus, window=window, ack_timeout=ack_timeout, check_every=min(0.25, max(0.02, ack_timeout / 4))
        )
        # Newest acknowledged token per subject while anything is pending: an older pending
        # message of such a subject must never be re-sent.
        self._acked_upto: dict[str, int] = {}
        self.recoveries = 0

    @property
    def acked(self) -> int:
        """Messages the stream acknowledged, duplicates included."""
        return self.stored

    async def publish(self, message: Message, on_ack: Callable[[float], None] | None = None) -> None:
        """Send one message; returns once it is written and the window has room for another.

        `on_ack(sent_at)` runs when the stream has stored it (for latency metrics).
        """
        await self._submit_batch([message], on_ack)

    async def publish_batch(
        self, messages: list[Message], on_last_ack: Callable[[float], None] | None = None
    ) -> None:
        """Send messages in order; `on_last_ack(sent_at)` runs when the last one is stored.

        The hot path of the watcher: one call per chunk of a watch stream, not per event.
        """
        await self._submit_batch(messages, on_last_ack)

    def _after_store(self, token: int, item: Pending) -> None:
        if self._pending:
            # Acks come in publish order, so this is the newest acknowledged token of the subject.
            self._acked_upto[item.subject] = token
        else:
            self._acked_upto.clear()

    def _refused(self, token: int, item: Pending, error: str, *, retryable: bool) -> None:
        # Whatever the reason (503 while JetStream restarts, or the stream refused), dropping the
        # event would lose it for good: keep it and recover the window at once.
        log.warning("publish to %s refused: %s", item.subject, error)
        self._trouble.set()

    async def _check(self, urgent: bool) -> None:
        """Recover when the oldest message waited too long for its ack, or an ack was a refusal."""
        if not self._bus.nc.is_connected:
            if urgent:
                self._trouble.set()  # still to be acted on once connected
            await self._bus.connected.wait()
            return
        oldest_token, oldest = next(iter(self._pending.items()))
        # Lost: a later message is already acknowledged. Stalled: no ack at all for a while
        # (a restarted server forgot what was on the wire). A slow but moving stream is
        # neither, however long the window's oldest message has waited.
        lost = oldest_token < self._max_acked
        quiet = time.monotonic() - max(oldest.sent_at, self._last_ack_at)
        if urgent or lost or quiet >= self._ack_timeout:
            await self._recover()
            # A stream that refuses at once (JetStream still starting) must not be hammered.
            await asyncio.sleep(self._check_every)

    async def _recover(self) -> None:
        """Re-send the newest unacknowledged message of each subject, in the original order."""
        self.recoveries += 1
        newest: dict[str, int] = {}
        for token, item in self._pending.items():
            newest[item.subject] = token
        resend = [
            self._pending[token]
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
        await self._resend_in_order(resend)
