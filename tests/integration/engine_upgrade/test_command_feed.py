"""CommandFeed on a real NATS server: the commands of one service, whether still queued in the
LH_COMMANDS work queue (read without a consumer, next to the actuator's) or published while
subscribed; after a reconnect the queue is read again."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from corral_bus import MSG_ID_HEADER, Bus
from corral_decision.command_feed import CommandFeed, stream_end
from corral_model import codec
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command
from corral_model.subjects import RESULTS_STREAM, command_stream, command_subject
from corral_runtime.logs import get_logger
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.secure_nats import connect_as

pytestmark = pytest.mark.integration
ENGINE_UPGRADE_COMMANDS = command_stream("engine-upgrade")
NS = "longhorn-system"


def upgrade(name: str, service: str = "engine-upgrade") -> Command:
    return new_command(
        service=service,
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace=NS, name=name),
        changes=(FieldValue(path="/spec/image", value="new"),),
        preconditions=(FieldValue(path="/spec/image", value="old"),),
        created_at=time.time(),
    )


async def publish(bus: Bus, command: Command) -> None:
    subject = command_subject(command.service, "volume", NS, command.target.name)
    await bus.js.publish(subject, codec.encode(command), headers={MSG_ID_HEADER: command.id})


async def test_queued_and_live_commands_of_the_service_only(bus: Bus, nats_server: NatsServer) -> None:
    # The actuator's durable consumer exists, as in production: the feed must not need its own.
    await bus.js.add_consumer(
        ENGINE_UPGRADE_COMMANDS, ConsumerConfig(durable_name="actuator", ack_policy=AckPolicy.EXPLICIT)
    )
    queued = [upgrade(f"q-{i}") for i in range(3)]
    for command in queued:
        await publish(bus, command)
    await publish(bus, upgrade("other", service="im-restart"))
    await bus.js.publish(command_subject("engine-upgrade", "volume", NS, "junk"), b"not a command")

    seen: list[str] = []
    feed = CommandFeed(
        bus, "engine-upgrade", lambda c: seen.append(c.target.name), get_logger(service="test")
    )
    await feed.start()
    try:
        assert await feed.scan() == 4  # three commands and the unreadable one, which is skipped
        assert seen == ["q-0", "q-1", "q-2"]
        live = upgrade("live")
        await publish(bus, live)
        await eventually(lambda: "live" in seen)
        assert "other" not in seen
        assert await stream_end(bus, ENGINE_UPGRADE_COMMANDS, ["lh.cmd.engine-upgrade.>"]) > 0
        assert await stream_end(bus, RESULTS_STREAM, ["lh.res.engine-upgrade.>"]) == 0
    finally:
        await feed.close()


async def test_the_queue_is_read_again_after_a_reconnect(bus: Bus, nats_server: NatsServer) -> None:
    seen: list[str] = []
    feed = CommandFeed(
        bus, "engine-upgrade", lambda c: seen.append(c.target.name), get_logger(service="test")
    )
    await feed.start()
    stop = asyncio.Event()
    task = asyncio.create_task(feed.run(stop, interval=0.05))
    try:
        await publish(bus, upgrade("before"))
        await eventually(lambda: feed.scans >= 1 and "before" in seen)
        scans, reconnects = feed.scans, bus.reconnects
        await asyncio.get_running_loop().run_in_executor(None, nats_server.restart)
        await eventually(lambda: bus.reconnects > reconnects and bus.is_connected, within=30)
        await eventually(lambda: feed.scans > scans, within=30)
        # still queued (no actuator took it): the rescan hands it out again; adoption is idempotent
        assert seen.count("before") >= 2
        await publish(bus, upgrade("after"))
        await eventually(lambda: "after" in seen)
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await feed.close()


async def test_the_scan_reads_the_queue_in_batches_as_the_service_user(
    secure_nats: NatsServer, secure_bus: Bus
) -> None:
    """600 queued commands of engine-upgrade between other services' take 3 requests of 256, read
    as the engine-upgrade NATS user (allowed: direct gets on its own command stream); a stream that allows no
    direct get is still read whole, one message get per command."""
    await secure_bus.js.add_consumer(
        ENGINE_UPGRADE_COMMANDS, ConsumerConfig(durable_name="actuator", ack_policy=AckPolicy.EXPLICIT)
    )
    mine = [upgrade(f"q-{i}") for i in range(600)]
    for index, command in enumerate(mine):
        await publish(secure_bus, command)
        if index % 100 == 0:
            await publish(secure_bus, upgrade(f"other-{index}", service="im-restart"))
    decider = await connect_as(secure_nats, "engine-upgrade")
    try:
        seen: list[str] = []
        feed = CommandFeed(decider, "engine-upgrade", lambda c: seen.append(c.target.name), get_logger())
        assert await feed.scan() == 600
        assert seen == [c.target.name for c in mine]  # oldest first, none of another service's
        assert feed.round_trips == 3
        info = await secure_bus.js.stream_info(ENGINE_UPGRADE_COMMANDS)
        info.config.allow_direct = False
        await secure_bus.js.update_stream(info.config)
        seen.clear()
        assert await feed.scan() == 600
        assert seen == [c.target.name for c in mine]
        assert feed.round_trips == 3 + 600  # one message get per command
        await decider.nc.flush()
        assert not decider.denials, list(decider.denials)
    finally:
        await decider.close()
