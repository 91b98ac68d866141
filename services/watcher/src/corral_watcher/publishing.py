"""Pipelined publishing into LH_OBJECTS whose last message per object is always the newest state
the watcher saw.

The pipelining itself (window, framing, ack matching) is the bus library's shared core,
`corral_bus.acks.AckPipeline`. What the watcher needs on top is an ordering guarantee per object
that survives reconnects, and the stream itself enforces it: every event carries
`Nats-Expected-Last-Subject-Sequence`, the stream sequence of the last message the watcher saw
stored on that object's subject (0: none). JetStream stores it only on top of that message and
refuses it otherwise ("wrong last sequence"). That is what makes a late frame harmless: a server
that froze (a partition, SIGSTOP) with the watcher's frames in its socket buffer processes them
when it thaws, long after the watcher moved to another server and stored newer states of the same
objects there; those frames expect a sequence that is no longer the subject's last, so they are
refused instead of overtaking the newer states. Deduplication by `Nats-Msg-Id` cannot do this: the
late frame is a *different* event of the object (an intermediate state the watcher never re-sent).

Chaining needs the previous event's sequence, which is known only once its ack arrives. So an
object has at most one event in flight; its later events are held, in order, and go out the moment
the one before is acknowledged, expecting the sequence that ack reported. Events of different
objects are pipelined as before, so a list of 100 000 objects still goes out in one window; an
object that changes twice within an ack's round trip (a few milliseconds) sees its second event
leave one round trip later, which can reorder it after other objects' events (consumers are
level-triggered per object: no decision depends on the order across objects). Held events count in
the window, so a stalled stream still stops the watch.

Recovery. When a message's ack is overdue (lost in a reconnect), when a later one is acknowledged
first (it is lost: JetStream answers one connection in order), or an ack reports a refusal other
than the expectation, every in-flight event is re-sent in order under the same `Nats-Msg-Id` and
the *same* expectation, until stored: if the first send was stored after all, the re-send is a
duplicate or refused as above, never stored twice. Nothing is ever given up while the process
lives (the watch behind it cannot be rewound, so dropping an event would lose it for good).

A "wrong last sequence" refusal is resolved against the subject's last stored message (read from
the stream leader, corral_watcher.conflicts): our own event (its ack was lost) is settled as stored,
a newer state (another watcher replica) supersedes ours once the API server vouches for it (a
state it never had is contradicted and replaced: `truth`), anything older gets ours on top of it.
Restarts: the sequences are learnt from the stream's last message per subject during bootstrap
(`learn`); what is still unknown is expected to be empty (0) and resolved as a conflict if not.
A tombstone goes out as many times as the stream keeps messages per subject (read from the
stream at start), so that it replaces the object's history without a rollup (tombstones.py).

Memory: one int per object's subject (70 bytes with the dict's slot: ≈ 7 MB at 100 000
objects), dropped when the object's tombstone is stored.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence

from nats.js.errors import NotFoundError

from corral_bus import Bus, StreamSettings
from corral_bus.acks import AckPipeline, OnStored, Pending, ack_sequence
from corral_bus.cancellation import cancel_and_wait
from corral_model.subjects import OBJECTS_STREAM
from corral_watcher.conflicts import LastMessage, Resolution, Verdict, overrule, resolve, resource_version
from corral_watcher.events import Message
from corral_watcher.tombstones import copies, is_tombstone
from corral_watcher.truth import Truth

log = logging.getLogger("corral.watcher.publishing")

WRONG_LAST_SEQUENCE = frozenset({10071, 10164})
"""JetStream's error codes for an expectation that does not hold: a single server (or a leader
checking the store) says which sequence is last; a clustered leader refusing a second message of
a subject still being replicated says nothing more (the watcher never sends one)."""

_RESOLVE_AT_ONCE = 64
"""Conflicts resolved concurrently (one request each to the stream leader)."""

_Held = tuple[Message, OnStored | None]


class OrderedPublisher(AckPipeline):
    """Publishes with pipelined acks; per subject, stored order always equals publish order and a
    frame stored late never becomes a subject's last message."""

    def __init__(
        self,
        bus: Bus,
        *,
        window: int = 8192,
        ack_timeout: float = 2.0,
        stream: str = OBJECTS_STREAM,
        truth: Truth | None = None,
        history: int | None = None,
    ) -> None:
        """`truth`: the API server, asked before a stored state newer than ours may supersede it
        (without it, the stream is believed: for tests of the publisher alone). `history`: the
        messages the stream keeps per subject, which a tombstone fills; None: read from the stream
        at start."""
        super().__init__(
            bus, window=window, ack_timeout=ack_timeout, check_every=min(0.25, max(0.02, ack_timeout / 4))
        )
        self._stream = stream
        self._truth = truth
        self.history = history
        self.last_seq: dict[str, int] = {}
        """Subject → stream sequence of its last stored message, as far as this publisher knows."""
        self._busy: set[str] = set()
        """Subjects with an event in flight (or released and about to be written)."""
        self._held: dict[str, deque[_Held]] = {}
        self._held_count = 0
        self._held_room = asyncio.Event()
        self._held_room.set()
        self._released: list[_Held] = []
        self._release = asyncio.Event()
        self._releaser: asyncio.Task[None] | None = None
        self._conflicts: set[int] = set()
        self._must_recover = False
        self.recoveries = 0
        self.conflicts = 0
        """"Wrong last sequence" refusals resolved."""
        self.superseded = 0
        """Events dropped because the stream already held a newer state of their object."""
        self.contradicted = 0
        """Stored messages the API server contradicted, replaced by our events."""

    @property
    def acked(self) -> int:
        """Messages the stream acknowledged, duplicates included."""
        return self.stored

    @property
    def held(self) -> int:
        """Events waiting for the ack of their object's previous event."""
        return self._held_count

    def learn(self, subject: str, seq: int) -> None:
        """What the stream's last message on `subject` is (bootstrap reads it), unless known."""
        if subject not in self._busy:
            self.last_seq.setdefault(subject, seq)

    async def start(self, fast: bool = True) -> None:
        await super().start(fast)
        if self.history is None:
            self.history = await self._stream_history()
        if self._releaser is None:
            self._releaser = asyncio.create_task(self._release_held(), name=f"held-{self._bus.name}")

    async def _stream_history(self) -> int:
        try:
            config = (await self._bus.js.stream_info(self._stream)).config
        except Exception as e:
            default = StreamSettings().objects_history
            log.warning(
                "reading %s's configuration failed (%s): assuming %d per subject", self._stream, e, default
            )
            return default
        limit = config.max_msgs_per_subject or 0
        if limit <= 0:
            log.warning("%s keeps every message per subject: deleted objects' history stays", self._stream)
            return 1
        return limit

    async def close(self) -> None:
        releaser, self._releaser = self._releaser, None
        await cancel_and_wait(releaser)
        await super().close()

    async def flush(self) -> None:
        """Wait until every event published so far is stored (held ones included)."""
        while self._pending or self._released or self._held_count:
            if self._pending:
                await self._drained.wait()
            else:
                await asyncio.sleep(0.001)  # released: the releaser writes them on its next turn

    async def publish(self, message: Message, on_ack: Callable[[float], None] | None = None) -> None:
        """Send one message; returns once it is written (or held) and the window has room.

        `on_ack(sent_at)` runs when the stream has stored it (for latency metrics).
        """
        await self.publish_batch([message], on_ack)

    async def publish_batch(
        self, messages: Sequence[Message], on_last_ack: Callable[[float], None] | None = None
    ) -> None:
        """Send messages in order; `on_last_ack(sent_at)` runs when the last one is stored.

        The hot path of the watcher: one call per chunk of a watch stream, not per event.
        """
        if not messages:
            return
        if self._releaser is None:
            await self.start()
        busy, held, last_seq = self._busy, self._held, self.last_seq
        history = self.history or 1
        out: list[Message] = []
        expects: list[int] = []
        last = len(messages) - 1
        last_out: OnStored | None = None
        for i, message in enumerate(messages):
            subject = message[0]
            while subject in busy and self._held_count >= self._window:
                if out:
                    await self._send(out, expects, None)
                    out, expects = [], []
                self._held_room.clear()
                await self._held_room.wait()
            # A tombstone is followed by its copies (tombstones.py); the batch's callback then
            # waits for the last copy.
            fill = history > 1 and message[3] is not None and is_tombstone(message[2])
            on_this = on_last_ack if i == last and not fill else None
            if subject in busy:
                queue = held.get(subject)
                if queue is None:
                    queue = held[subject] = deque()
                queue.append((message, on_this))
                self._held_count += 1
            else:
                busy.add(subject)
                out.append(message)
                expects.append(last_seq.get(subject, 0))
                last_out = on_this
            if fill:
                more = copies(message, history)
                queue = held.setdefault(subject, deque())
                queue.extend((copy, None) for copy in more[:-1])
                queue.append((more[-1], on_last_ack if i == last else None))
                self._held_count += len(more)
        if out:
            await self._send(out, expects, last_out)

    async def _send(self, messages: list[Message], expects: list[int], on_last: OnStored | None) -> None:
        try:
            await self._submit_batch(messages, on_last, expects)
        except BaseException:
            self._unstick(messages)
            raise

    async def _release_held(self) -> None:
        """Write the events whose object's previous event is now stored, expecting its sequence."""
        while True:
            await self._release.wait()
            self._release.clear()
            while self._released:
                batch, self._released = self._released, []
                messages = [message for message, _ in batch]
                expects = [self.last_seq.get(message[0], 0) for message in messages]
                try:
                    await self._submit_batch(messages, None, expects, [on for _, on in batch])
                except Exception:
                    log.exception("writing %d held events failed", len(messages))
                    self._unstick(messages)

    def _unstick(self, messages: Sequence[Message]) -> None:
        """After a write failed: subjects of `messages` left busy with nothing in flight move on."""
        waiting = {item.subject for item in self._pending.values()}
        waiting.update(message[0] for message, _ in self._released)
        for subject in {message[0] for message in messages}:
            if subject in self._busy and subject not in waiting:
                self._advance(subject)

    def _advance(self, subject: str) -> None:
        """The subject's event in flight is settled: release its next held event, if any."""
        queue = self._held.get(subject)
        if not queue:
            self._busy.discard(subject)
            return
        entry = queue.popleft()
        if not queue:
            del self._held[subject]
        self._held_count -= 1
        if self._held_count < self._window:
            self._held_room.set()
        self._released.append(entry)
        self._release.set()

    def _after_store(self, token: int, item: Pending, ack: bytes) -> None:
        # Runs for every acknowledged event: _advance's common case is inlined.
        subject = item.subject
        seq = ack_sequence(ack)
        held = self._held
        if seq:
            # Only a tombstone (or a traced event) has headers: the cheap test first.
            if item.headers is not None and subject not in held and is_tombstone(item.msg_id):
                # Tombstone (its last copy): nothing follows until the object is re-created, and its
                # sequence is then learnt from the refusal: the map stays the size of the live objects.
                self.last_seq.pop(subject, None)
            else:
                self.last_seq[subject] = seq
        if subject in held:
            self._advance(subject)
        else:
            self._busy.discard(subject)

    def _forget(self, token: int) -> None:
        item = self._pending.get(token)
        super()._forget(token)
        if item is not None:
            self._conflicts.discard(token)
            self._advance(item.subject)

    def _refused(self, token: int, item: Pending, error: str, *, retryable: bool, err_code: int) -> None:
        if err_code in WRONG_LAST_SEQUENCE:
            self._conflicts.add(token)
        else:
            # Whatever the reason (503 while JetStream restarts, or the stream refused), dropping
            # the event would lose it for good: keep it and recover the window at once.
            log.warning("publish to %s refused: %s", item.subject, error)
            self._must_recover = True
        self._trouble.set()

    async def _check(self, urgent: bool) -> None:
        """Resolve conflicts; recover when the oldest message waited too long for its ack, a later
        one was acknowledged first, or an ack was a refusal."""
        if not self._bus.nc.is_connected:
            if urgent:
                self._trouble.set()  # still to be acted on once connected
            await self._bus.connected.wait()
            return
        if self._conflicts:
            await self._resolve_conflicts()
        oldest_token, oldest = next(
            ((t, item) for t, item in self._pending.items() if t not in self._conflicts), (0, None)
        )
        if oldest is None:
            return
        # Lost: a later message is already acknowledged. Stalled: no ack at all for a while
        # (a restarted server forgot what was on the wire). A slow but moving stream is
        # neither, however long the window's oldest message has waited.
        lost = oldest_token < self._max_acked
        quiet = time.monotonic() - max(oldest.sent_at, self._last_ack_at)
        if self._must_recover or lost or quiet >= self._ack_timeout:
            await self._recover()
            # A stream that refuses at once (JetStream still starting) must not be hammered.
            await asyncio.sleep(self._check_every)

    async def _recover(self) -> None:
        """Re-send every event in flight, in order, with its id and expectation unchanged."""
        self._must_recover = False
        resend = [self._pending.pop(token) for token in list(self._pending) if token not in self._conflicts]
        if not resend:
            return
        self.recoveries += 1
        log.warning("%d events unacknowledged after %.1fs: re-sending them", len(resend), self._ack_timeout)
        # New publishes wait until the re-sends are written, or one could overtake them.
        await self._resend_in_order(resend)

    async def _resolve_conflicts(self) -> None:
        """Settle each refused event against its subject's last stored message (conflicts.py)."""
        self._conflicts.intersection_update(self._pending)
        tokens = sorted(self._conflicts)
        for start in range(0, len(tokens), _RESOLVE_AT_ONCE):
            chunk = tokens[start : start + _RESOLVE_AT_ONCE]
            answers = await asyncio.gather(
                *(self.last_message(self._pending[token].subject) for token in chunk),
                return_exceptions=True,
            )
            for token, answer in zip(chunk, answers, strict=True):
                item = self._pending.get(token)
                if item is None or token not in self._conflicts:
                    continue  # settled meanwhile (a late ack of an earlier send)
                if isinstance(answer, BaseException):
                    log.warning("reading the last message of %s failed: %s", item.subject, answer)
                    continue  # stays a conflict: tried again at the next check
                resolution = resolve(item.msg_id, item.payload, answer)
                if resolution.verdict is Verdict.SUPERSEDED and self._truth is not None:
                    try:
                        truth = await self._truth.newest(item.payload)
                    except Exception as e:
                        # Never believed unchecked: a forged state would win for good.
                        log.warning("asking the API server about %s failed: %s", item.subject, e)
                        continue  # stays a conflict: tried again at the next check
                    resolution = overrule(resolution, answer, truth)
                    if resolution.verdict is Verdict.CONTRADICTED:
                        assert answer is not None
                        stored = resource_version(answer.data)
                        self._truth.contradicted(item.subject, item.payload, stored, truth)
                if token in self._conflicts and token in self._pending:
                    await self._settle_conflict(token, item, resolution)

    async def _settle_conflict(self, token: int, item: Pending, resolution: Resolution) -> None:
        self._conflicts.discard(token)
        self.conflicts += 1
        if resolution.seq:
            self.last_seq[item.subject] = resolution.seq
        else:
            self.last_seq.pop(item.subject, None)
        if resolution.verdict is Verdict.CONTRADICTED:
            self.contradicted += 1
        if resolution.verdict in (Verdict.REPUBLISH, Verdict.CONTRADICTED):
            log.info("re-publishing %s on top of sequence %d", item.subject, resolution.seq)
            item.expect = resolution.seq
            # Under a new token, like a recovery's re-send: the refused token is behind acks that
            # came since, and would look lost.
            del self._pending[token]
            await self._resend_in_order([item])
            return
        if resolution.verdict is Verdict.STORED:
            self.stored += 1
            if item.on_stored is not None:
                try:
                    item.on_stored(item.sent_at)
                except Exception:
                    log.exception("ack callback for %s failed", item.subject)
        else:
            self.superseded += 1
            log.info("%s [%s]: a newer state is already stored", item.subject, item.msg_id)
        self._forget(token)

    async def last_message(self, subject: str) -> LastMessage | None:
        """The subject's last stored message, as the stream leader has it (None: there is none)."""
        try:
            raw = await self._bus.js.get_last_msg(self._stream, subject)
        except NotFoundError:
            return None
        headers = raw.headers or {}
        return LastMessage(raw.seq or 0, headers.get("Nats-Msg-Id", ""), raw.data or b"")
