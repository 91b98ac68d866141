"""A consumer survives a NATS restart without losing any message the publisher saw acknowledged."""

from __future__ import annotations

import asyncio

import pytest

from corral_bus import (
    BootstrapReader,
    Bus,
    Consumer,
    ConsumerSpec,
    Delivery,
    Publisher,
    StreamMessage,
    connect,
    ensure_streams,
    follow,
)
from corral_model import subjects
from tests.fixtures.nats import BinaryNats, NatsServer
from tests.fixtures.processes import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.real_nats("a real restart (away, then 503 until its store is back) is more than the fake's"),
]
SENDER = "engine-upgrade"
COMMANDS = subjects.command_stream(SENDER)


def _node(i: int) -> str:
    return subjects.object_subject("node", "longhorn-system", f"node-{i}")


def _subject(i: int) -> str:
    return subjects.command_subject("engine-upgrade", "volume", "longhorn-system", f"pvc-{i}")


async def test_consumer_and_publisher_survive_server_restart(bus: Bus, nats_server: NatsServer) -> None:
    # Separate connections, as separate services would have.
    producer_bus = await connect(nats_server.url, name="producer")
    consumer_bus = await connect(nats_server.url, name="consumer")
    handled: set[str] = set()
    release = asyncio.Event()

    async def handle(delivery: Delivery) -> None:
        if len(handled) >= 50:
            await release.wait()  # hold the consumer mid-stream while the server goes away
        handled.add(delivery.data.decode())

    publisher = Publisher(producer_bus, window=64)
    for i in range(100):
        await publisher.publish(
            f"{subjects.COMMANDS_PREFIX}.{SENDER}.volume.ns.v{i}", f"c{i}".encode(), msg_id=f"c{i}"
        )
    await publisher.flush()  # all 100 acknowledged: none may be lost

    spec = ConsumerSpec(stream=COMMANDS, durable="survivor", batch=10, ack_wait=2.0)
    consumer = Consumer(consumer_bus, spec, handle)
    consumer.start()
    await eventually(lambda: len(handled) >= 50, what="first half handled")

    await asyncio.to_thread(nats_server.restart)
    release.set()
    # Published after the restart, through the reconnected client.
    for i in range(100, 120):
        await publisher.publish(
            f"{subjects.COMMANDS_PREFIX}.{SENDER}.volume.ns.v{i}", f"c{i}".encode(), msg_id=f"c{i}"
        )
    await publisher.flush()

    await eventually(lambda: len(handled) == 120, within=30, what="every acknowledged message handled")
    assert handled == {f"c{i}" for i in range(120)}
    await eventually(lambda: consumer_bus.reconnects >= 1, what="consumer reconnected")
    await consumer.stop()
    await publisher.close()
    await producer_bus.close()
    await consumer_bus.close()


async def test_publishing_through_a_restart_stores_everything_once(bus: Bus, nats_server: NatsServer) -> None:
    producer_bus = await connect(nats_server.url, name="producer")
    # A long ack timeout: what the restart swallowed must be re-sent because of the reconnect.
    publisher = Publisher(producer_bus, window=32, ack_timeout=20.0, give_up_after=60.0)
    restarted = asyncio.create_task(asyncio.to_thread(nats_server.restart))
    for i in range(400):
        await publisher.publish(subjects.object_subject("volume", "ns", f"v{i}"), b"{}", msg_id=f"e{i}")
        if i % 50 == 0:
            await asyncio.sleep(0)  # let the restart make progress while messages are in flight
    await restarted
    async with asyncio.timeout(10):
        await publisher.flush()
    await eventually(lambda: bus.is_connected, what="test bus reconnected")
    info = await bus.js.stream_info(subjects.OBJECTS_STREAM)
    assert info.state.messages == 400
    await publisher.close()
    await producer_bus.close()


async def test_bootstrap_reader_follows_through_a_restart(bus: Bus, nats_server: NatsServer) -> None:
    reader_bus = await connect(nats_server.url, name="reader")
    publisher = Publisher(bus)
    for i in range(10):
        await publisher.publish(
            subjects.object_subject("node", "ns", f"n{i}"), f"n{i}".encode(), msg_id=f"n{i}"
        )
    await publisher.flush()
    reader = BootstrapReader(reader_bus, [f"{subjects.OBJECTS_PREFIX}.node.>"])
    seen: list[bytes] = []

    async def read() -> None:
        async for message in reader:
            seen.append(message.data)

    task = asyncio.create_task(read())
    await eventually(lambda: len(seen) == 10 and reader.ready.is_set(), what="bootstrapped")
    await asyncio.to_thread(nats_server.restart)
    await eventually(lambda: bus.is_connected, what="reconnected")
    for i in range(10, 15):
        await publisher.publish(
            subjects.object_subject("node", "ns", f"n{i}"), f"n{i}".encode(), msg_id=f"n{i}"
        )
    await publisher.flush()
    await eventually(lambda: len(seen) == 15, within=20, what="followed after restart")
    assert seen == [f"n{i}".encode() for i in range(15)]  # no repeats, no gaps, in order
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await reader.close()
    await publisher.close()
    await reader_bus.close()


async def test_closing_a_reader_while_nats_is_away_does_not_wait_for_it() -> None:
    """A service shutting down during an outage must not hang on the consumer clean-up: the server
    reaps the ephemeral consumer itself. (Without the bound, close waited out a 5 s request timeout.)
    A private server, so stopping it disturbs no other test."""
    server = BinaryNats()
    server.start()
    reader_bus = await connect(server.url, name="reader")
    try:
        await ensure_streams(reader_bus.js)
        reader = BootstrapReader(reader_bus, [f"{subjects.OBJECTS_PREFIX}.node.>"])
        task = asyncio.create_task(follow(reader, on_message=lambda _: asyncio.sleep(0)))
        await eventually(lambda: reader.ready.is_set(), what="bootstrapped")
        await asyncio.to_thread(server.stop)
        await eventually(lambda: not reader_bus.is_connected, what="reader disconnected")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        async with asyncio.timeout(2.5):
            await reader.close()
    finally:
        await reader_bus.close()
        server.stop()


async def test_bootstrap_readers_cancelled_after_a_restart_end(bus: Bus, nats_server: NatsServer) -> None:
    """Issue 19 part 4: after a NATS restart a reader's task could stay 'cancelling' for ever. Its
    pull waited with Python 3.11's `asyncio.wait_for`, which drops a cancellation that lands while
    the awaited event has just fired (and nats-py's flush drops one too); the reader then read on
    as if never cancelled, and only bounded waits kept the watcher from hanging on it.

    Many readers follow one subject through a restart; when the first of them handles a message,
    it cancels all the others, which are then in every state of being woken by that same message.
    Every cancelled reader must end."""
    reader_bus = await connect(nats_server.url, name="readers")
    readers = [BootstrapReader(reader_bus, [f"{subjects.OBJECTS_PREFIX}.node.>"]) for _ in range(40)]
    tasks: list[asyncio.Task[None]] = []

    async def cancel_the_others(message: StreamMessage) -> None:
        if message.data == b"cancel now":
            for task in tasks[1:]:
                task.cancel()

    async def ignore(message: StreamMessage) -> None:
        return None

    tasks.extend(
        asyncio.create_task(follow(r, cancel_the_others if i == 0 else ignore)) for i, r in enumerate(readers)
    )
    publisher = Publisher(bus)
    try:
        await eventually(lambda: all(r.ready.is_set() for r in readers), what="readers bootstrapped")
        await asyncio.to_thread(nats_server.restart)
        await eventually(lambda: reader_bus.reconnects >= 1 and bus.is_connected, what="reconnected")
        for i in range(3):  # every reader re-binds after the restart and reads these
            await publisher.publish(subjects.object_subject("node", "ns", f"n{i}"), b"x", msg_id=f"warm-{i}")
        await publisher.flush()
        await eventually(lambda: all(r.last_seq >= 3 for r in readers), within=20, what="readers following")
        await publisher.publish(subjects.object_subject("node", "ns", "n0"), b"cancel now", msg_id="cancel")
        await publisher.flush()
        await eventually(lambda: all(t.cancelling() for t in tasks[1:]), what="others cancelled")
        done, stuck = await asyncio.wait(tasks[1:], timeout=10)
        assert not stuck, f"{len(stuck)} of {len(tasks) - 1} cancelled readers still running"
        assert all(t.cancelled() for t in done)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=5)
        for reader in readers:
            async with asyncio.timeout(5):
                await reader.close()
        await publisher.close()
        await reader_bus.close()
