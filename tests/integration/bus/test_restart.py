"""A consumer survives a NATS restart without losing any message the publisher saw acknowledged."""

from __future__ import annotations

import asyncio

import pytest

from corral_bus import Bus, Consumer, ConsumerSpec, Delivery, Publisher, connect
from corral_model import subjects
from tests.fixtures.nats import NatsServer
from tests.integration.bus.helpers import eventually

pytestmark = pytest.mark.integration


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
            f"{subjects.COMMANDS_PREFIX}.svc.volume.ns.v{i}", f"c{i}".encode(), msg_id=f"c{i}"
        )
    await publisher.flush()  # all 100 acknowledged: none may be lost

    spec = ConsumerSpec(stream=subjects.COMMANDS_STREAM, durable="survivor", batch=10, ack_wait=2.0)
    consumer = Consumer(consumer_bus, spec, handle)
    consumer.start()
    await eventually(lambda: len(handled) >= 50, what="first half handled")

    await asyncio.to_thread(nats_server.restart)
    release.set()
    # Published after the restart, through the reconnected client.
    for i in range(100, 120):
        await publisher.publish(
            f"{subjects.COMMANDS_PREFIX}.svc.volume.ns.v{i}", f"c{i}".encode(), msg_id=f"c{i}"
        )
    await publisher.flush()

    await eventually(lambda: len(handled) == 120, within=30, what="every acknowledged message handled")
    assert handled == {f"c{i}" for i in range(120)}
    await eventually(lambda: consumer_bus.reconnects >= 1, what="consumer reconnected")
    await consumer.stop()
    await publisher.close()
    await producer_bus.close()
    await consumer_bus.close()
