"""Durable pull consumers: ack on success, nak with backoff on transient failure, LH_DEAD for poison."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import time

import pytest

from corral_bus import Bus, Consumer, ConsumerSpec, Delivery, Publisher, TransientError
from corral_model import codec, subjects
from corral_model.envelopes import Command, DeadLetter, Target, Verb, new_command
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration

COMMANDS = subjects.command_stream("engine-upgrade")


def _command(name: str) -> Command:
    return new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="volume", namespace="longhorn-system", name=name),
        reason="test",
    )


async def _dead_letters(bus: Bus) -> list[DeadLetter]:
    psub = await bus.js.pull_subscribe(f"{subjects.DEAD_PREFIX}.>", stream=subjects.DEAD_STREAM)
    letters: list[DeadLetter] = []
    try:
        msgs = await psub.fetch(100, timeout=1.0)
    except TimeoutError:
        msgs = []
    for msg in msgs:
        letters.append(codec.decode(msg.data, DeadLetter))
        await msg.ack()
    await psub.unsubscribe()
    return letters


async def test_poison_message_goes_to_dead_letters_and_consumer_keeps_going(bus: Bus) -> None:
    handled: list[str] = []

    async def handle(delivery: Delivery) -> None:
        handled.append(delivery.decode(Command).target.name)

    publisher = Publisher(bus)
    good = _command("before")
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.a", codec.encode(good), msg_id=good.id
    )
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.b", b"\xff not json", msg_id="poison"
    )
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.c",
        b'{"schema": "corral.command/v9", "id": "x"}',
        msg_id="future-major",
    )
    after = _command("after")
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.d", codec.encode(after), msg_id=after.id
    )
    await publisher.flush()

    consumer = Consumer(bus, ConsumerSpec(stream=COMMANDS, durable="actuator"), handle)
    consumer.start()
    await eventually(lambda: consumer.stats.acked + consumer.stats.dead_lettered == 4, what="all handled")
    await consumer.stop()
    assert handled == ["before", "after"]
    letters = sorted(await _dead_letters(bus), key=lambda d: d.subject)
    assert [d.subject.rsplit(".", 1)[1] for d in letters] == ["b", "c"]
    assert letters[0].reason.startswith("undecodable:")
    assert letters[0].payload_b64  # not UTF-8, kept byte for byte
    assert "unsupported schema version" in letters[1].reason
    assert letters[1].consumer == "actuator"
    # Acked: nothing left in the work queue.
    assert (await bus.js.stream_info(COMMANDS)).state.messages == 0
    await publisher.close()


async def test_transient_failure_is_redelivered_after_backoff(bus: Bus) -> None:
    attempts: list[tuple[int, float]] = []

    async def handle(delivery: Delivery) -> None:
        attempts.append((delivery.num_delivered, time.monotonic()))
        if delivery.num_delivered < 3:
            raise TransientError("API server unavailable")

    publisher = Publisher(bus)
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.v", codec.encode(_command("v")), msg_id="c1"
    )
    await publisher.flush()
    spec = ConsumerSpec(stream=COMMANDS, durable="retrying", backoff=(0.3, 0.6), max_deliver=5)
    consumer = Consumer(bus, spec, handle)
    consumer.start()
    await eventually(lambda: consumer.stats.acked == 1, what="acked after retries")
    await consumer.stop()
    assert [n for n, _ in attempts] == [1, 2, 3]
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.3 * 0.9
    assert gaps[1] >= 0.6 * 0.9
    assert consumer.stats.dead_lettered == 0
    await publisher.close()


async def test_exhausted_deliveries_end_in_dead_letters(bus: Bus) -> None:
    async def handle(delivery: Delivery) -> None:
        raise TransientError("still down")

    publisher = Publisher(bus)
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.w", codec.encode(_command("w")), msg_id="c2"
    )
    await publisher.flush()
    spec = ConsumerSpec(stream=COMMANDS, durable="giving-up", backoff=(0.1,), max_deliver=3)
    consumer = Consumer(bus, spec, handle)
    consumer.start()
    await eventually(lambda: consumer.stats.dead_lettered == 1, what="dead-lettered")
    await consumer.stop()
    letters = await _dead_letters(bus)
    assert len(letters) == 1
    assert letters[0].deliveries == 3
    assert letters[0].reason.startswith("max-deliveries:") and "still down" in letters[0].reason
    await publisher.close()


async def test_a_hung_handler_is_cut_off_and_retried(bus: Bus) -> None:
    calls: list[int] = []

    async def handle(delivery: Delivery) -> None:
        calls.append(delivery.num_delivered)
        if delivery.num_delivered == 1:
            await asyncio.Event().wait()  # an API call that never returns

    publisher = Publisher(bus)
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.h", codec.encode(_command("h")), msg_id="h1"
    )
    await publisher.flush()
    spec = ConsumerSpec(stream=COMMANDS, durable="hung", backoff=(0.1,), handler_timeout=0.5)
    consumer = Consumer(bus, spec, handle)
    consumer.start()
    await eventually(lambda: consumer.stats.acked == 1, what="handled on the second delivery")
    await consumer.stop()
    assert calls == [1, 2]
    await publisher.close()


@pytest.mark.parametrize(
    ("payload", "as_text"),
    [(b"\xff" + b"x" * 999_999, False), (b'{"schema": "corral.command/v1", "id": "' + b"x" * 999_950, True)],
    ids=["binary", "text"],
)
async def test_a_message_too_large_to_dead_letter_whole_is_cut_and_leaves_the_queue(
    bus: Bus, payload: bytes, as_text: bool
) -> None:
    """~1 MB (the server's default max_payload) of undecodable command: a letter wrapping all of it
    would not fit in a NATS message, so the letter keeps its first bytes, its size and a SHA-256,
    and the command leaves the work queue instead of failing on every delivery for ever."""
    assert len(payload) <= bus.nc.max_payload - 1024 < len(payload) * 4 // 3

    async def handle(delivery: Delivery) -> None:
        delivery.decode(Command)

    publisher = Publisher(bus)
    await publisher.publish(f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.big", payload, msg_id="big")
    after = _command("after")
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.after", codec.encode(after), msg_id=after.id
    )
    await publisher.flush()
    consumer = Consumer(bus, ConsumerSpec(stream=COMMANDS, durable="actuator"), handle)
    consumer.start()
    await eventually(lambda: consumer.stats.dead_lettered == 1 and consumer.stats.acked == 1, what="handled")
    await consumer.stop()
    assert consumer.stats.redelivering == 0  # parked at the first try
    [letter] = await _dead_letters(bus)
    assert letter.reason.startswith("undecodable:") and letter.subject.endswith(".big")
    assert letter.truncated and letter.payload_size == len(payload)
    assert letter.payload_sha256 == hashlib.sha256(payload).hexdigest()
    kept = letter.payload.encode() if as_text else base64.b64decode(letter.payload_b64)
    assert kept == payload[: len(kept)] and 0 < len(kept) < len(payload)
    assert (await bus.js.stream_info(COMMANDS)).state.messages == 0
    await publisher.close()


async def test_concurrent_handlers_settle_each_message_by_its_own_outcome(bus: Bus) -> None:
    """`concurrency` handlers at once from one feed: never more, and each message still acked,
    retried or dead-lettered by how its own handler returned."""
    running = 0
    most = 0
    release = asyncio.Event()
    handled: list[str] = []
    failed_once: set[str] = set()

    async def handle(delivery: Delivery) -> None:
        nonlocal running, most
        name = delivery.decode(Command).target.name
        running += 1
        most = max(most, running)
        try:
            await release.wait()
            if name == "flaky" and name not in failed_once:
                failed_once.add(name)
                raise TransientError("not yet", delay=0.05)
            handled.append(name)
        finally:
            running -= 1

    publisher = Publisher(bus)
    names = [f"v{i}" for i in range(10)] + ["flaky"]
    for name in names:
        command = _command(name)
        await publisher.publish(
            f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.{name}",
            codec.encode(command),
            msg_id=command.id,
        )
    await publisher.publish(
        f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.p", b"\xff", msg_id="poison"
    )
    await publisher.flush()

    spec = ConsumerSpec(stream=COMMANDS, durable="actuator", batch=16, concurrency=4)
    consumer = Consumer(bus, spec, handle)
    consumer.start()
    await eventually(lambda: running == 4, what="four handlers running at once")
    release.set()
    await eventually(lambda: consumer.stats.acked == len(names), what="every command handled")
    await consumer.stop()
    assert most == 4
    assert sorted(handled) == sorted(names)
    assert consumer.stats.redelivering == 1 and consumer.stats.dead_lettered == 1
    assert [d.subject.rsplit(".", 1)[1] for d in await _dead_letters(bus)] == ["p"]
    info = await bus.js.stream_info(COMMANDS)
    assert info.state.messages == 0


async def test_stop_cuts_off_concurrent_handlers_and_their_messages_come_again(bus: Bus) -> None:
    """Handlers still running when stop's grace runs out are cancelled; their messages are naked
    and delivered again to the next consumer, none lost."""
    started: list[str] = []

    async def hang(delivery: Delivery) -> None:
        started.append(delivery.subject)
        await asyncio.Event().wait()

    publisher = Publisher(bus)
    for i in range(3):
        command = _command(f"h{i}")
        await publisher.publish(
            f"{subjects.COMMANDS_PREFIX}.engine-upgrade.volume.ns.h{i}",
            codec.encode(command),
            msg_id=command.id,
        )
    await publisher.flush()
    spec = ConsumerSpec(stream=COMMANDS, durable="actuator", batch=8, concurrency=3)
    first = Consumer(bus, spec, hang)
    first.start()
    await eventually(lambda: len(started) == 3, what="three handlers hanging")
    await first.stop(grace=0.1)
    assert first.stats.acked == 0

    seen: list[str] = []

    async def handle(delivery: Delivery) -> None:
        seen.append(delivery.subject)

    second = Consumer(bus, spec, handle)
    second.start()
    await eventually(lambda: second.stats.acked == 3, what="the cut-off commands delivered again")
    await second.stop()
    assert sorted(seen) == sorted(started)
