"""Consumer lifecycle: re-created when deleted, graceful stop hands work back, a crashed handler's
message is dead-lettered once it exhausted its deliveries."""

from __future__ import annotations

import asyncio
import time

import pytest

from corral_bus import Bus, Consumer, ConsumerSpec, Delivery, Publisher, connect
from corral_model import codec, subjects
from corral_model.envelopes import DeadLetter
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration

SENDER = "im-restart"
COMMANDS = subjects.command_stream(SENDER)


def _subject(i: int) -> str:
    return subjects.command_subject("im-restart", "pod", "longhorn-system", f"instance-manager-{i}")


async def _publish(bus: Bus, first: int, count: int) -> None:
    publisher = Publisher(bus)
    for i in range(first, first + count):
        await publisher.publish(_subject(i), f"m{i}".encode(), msg_id=f"m{i}")
    await publisher.flush()
    await publisher.close()


async def test_deleted_consumer_is_recreated(bus: Bus) -> None:
    handled: list[bytes] = []

    async def handle(delivery: Delivery) -> None:
        handled.append(delivery.data)

    consumer = Consumer(bus, ConsumerSpec(stream=COMMANDS, durable="phoenix"), handle)
    consumer.start()
    await _publish(bus, 0, 1)
    await eventually(lambda: handled == [b"m0"], what="first message")
    await bus.js.delete_consumer(COMMANDS, "phoenix")
    await _publish(bus, 1, 1)
    await eventually(lambda: handled == [b"m0", b"m1"], within=15, what="handled after re-creation")
    assert consumer.stats.rebinds >= 2
    await consumer.stop()


async def test_graceful_stop_finishes_in_hand_and_gives_back_the_rest(bus: Bus) -> None:
    started = asyncio.Event()
    release = asyncio.Event()
    first: list[bytes] = []

    async def slow(delivery: Delivery) -> None:
        started.set()
        await release.wait()
        first.append(delivery.data)

    await _publish(bus, 0, 20)
    spec = ConsumerSpec(stream=COMMANDS, durable="workers", batch=10, ack_wait=30.0)
    a = Consumer(bus, spec, slow)
    a.start()
    async with asyncio.timeout(10):
        await started.wait()
    stopping = asyncio.create_task(a.stop(grace=10))
    release.set()
    await stopping
    assert len(first) == 1  # the one in hand was finished (and acked), nothing more was taken

    rest: list[bytes] = []

    async def quick(delivery: Delivery) -> None:
        rest.append(delivery.data)

    b = Consumer(bus, spec, quick)
    began = time.monotonic()
    b.start()
    # Given back with a nak, not left to time out: well within ack_wait.
    await eventually(lambda: len(rest) == 19, within=15, what="the rest handled by the next replica")
    assert time.monotonic() - began < spec.ack_wait / 2
    assert sorted(first + rest) == sorted(f"m{i}".encode() for i in range(20))
    await b.stop()


async def test_message_of_a_crashed_handler_is_dead_lettered(bus: Bus, nats_server: NatsServer) -> None:
    spec = ConsumerSpec(stream=COMMANDS, durable="crashy", backoff=(), max_deliver=1, ack_wait=1.0)
    crashing_bus = await connect(nats_server.url, name="crashing")
    got = asyncio.Event()

    async def hang(delivery: Delivery) -> None:
        got.set()
        await asyncio.Event().wait()

    crashing = Consumer(crashing_bus, spec, hang)
    task = crashing.start()
    await _publish(bus, 0, 1)
    async with asyncio.timeout(10):
        await got.wait()
    await crashing_bus.nc.close()  # the process dies: no ack, no nak
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

    async def never(delivery: Delivery) -> None:
        raise AssertionError("a message past max_deliver must not be delivered again")

    survivor = Consumer(bus, spec, never)
    survivor.start()
    await eventually(lambda: survivor.stats.dead_lettered == 1, within=15, what="dead-lettered by advisory")
    await survivor.stop()
    psub = await bus.js.pull_subscribe(f"{subjects.DEAD_PREFIX}.>", stream=subjects.DEAD_STREAM)
    [msg] = await psub.fetch(1, timeout=5)
    letter = codec.decode(msg.data, DeadLetter)
    assert letter.reason.startswith("max-deliveries:") and "not acknowledged" in letter.reason
    assert letter.payload == "m0" and letter.subject == _subject(0)
    # Gone from the work queue: it lives on in LH_DEAD only.
    assert (await bus.js.stream_info(COMMANDS)).state.messages == 0


async def test_messages_waiting_behind_a_slow_handler_are_not_redelivered(bus: Bus) -> None:
    deliveries: list[tuple[bytes, int]] = []

    async def slow(delivery: Delivery) -> None:
        deliveries.append((delivery.data, delivery.num_delivered))
        await asyncio.sleep(0.4)  # a slow API call; together the batch outlasts ack_wait

    await _publish(bus, 0, 6)
    spec = ConsumerSpec(stream=COMMANDS, durable="slow", batch=6, ack_wait=0.9)
    consumer = Consumer(bus, spec, slow)
    consumer.start()
    await eventually(lambda: consumer.stats.acked == 6, within=20, what="all six handled")
    await consumer.stop()
    assert sorted(deliveries) == sorted((f"m{i}".encode(), 1) for i in range(6))


async def test_a_message_that_ran_out_of_deliveries_while_no_replica_listened_is_parked(
    bus: Bus, nats_server: NatsServer
) -> None:
    """The advisory goes out once, while no corral consumer runs (the only replica died holding the
    message); LH_ADVISORIES keeps it, and a replica started afterwards parks the message."""
    spec = ConsumerSpec(stream=COMMANDS, durable="lonely", backoff=(), max_deliver=1, ack_wait=0.5)

    async def never(delivery: Delivery) -> None:
        raise AssertionError("a message past max_deliver must not be delivered again")

    first = Consumer(bus, spec, never)
    first.start()
    await first.ready.wait()
    await first.stop()  # the consumer exists on the server; no replica runs from here on
    await _publish(bus, 0, 1)
    pull = await bus.js.pull_subscribe_bind("lonely", COMMANDS)
    [taken] = await pull.fetch(1, timeout=5)  # a replica takes it and dies: never acked
    await pull.unsubscribe()
    assert taken.data == b"m0"

    async def advisory_stored() -> bool:
        info = await bus.js.stream_info(subjects.ADVISORIES_STREAM)
        return info.state.messages >= 1

    await eventually(advisory_stored, within=15, what="the max-deliveries advisory in LH_ADVISORIES")
    assert (await bus.js.stream_info(COMMANDS)).state.messages == 1  # stuck, so far
    late = Consumer(bus, spec, never)
    late.start()
    await eventually(lambda: late.stats.dead_lettered == 1, within=15, what="parked from LH_ADVISORIES")
    await late.stop()
    assert (await bus.js.stream_info(COMMANDS)).state.messages == 0
    psub = await bus.js.pull_subscribe(f"{subjects.DEAD_PREFIX}.>", stream=subjects.DEAD_STREAM)
    [msg] = await psub.fetch(1, timeout=5)
    letter = codec.decode(msg.data, DeadLetter)
    assert letter.payload == "m0" and letter.reason.startswith("max-deliveries:")


async def test_an_idle_advisory_reader_waits_quietly(bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    """No advisory for a while is the normal case: the reader keeps waiting without a warning
    (nats-py ends some idle fetches with a plain TimeoutError, which was logged as a failure)."""

    async def handle(delivery: Delivery) -> None:
        pass

    spec = ConsumerSpec(stream=COMMANDS, durable="quiet", fetch_wait=0.02)
    consumer = Consumer(bus, spec, handle)
    with caplog.at_level("WARNING", logger="corral.bus.consumer"):
        consumer.start()
        await asyncio.sleep(3.0)
        await consumer.stop()
    assert [r.getMessage() for r in caplog.records if "advisories" in r.getMessage()] == []
