"""Closing a connection never waits on messages nobody will handle any more.

A stopped service leaves messages queued in its subscriptions (a pull request's late status after
its fetch gave up, deliveries behind a stopped handler); `Bus.close` used to drain them and held the
process for nats-py's 30 s drain timeout, so the pod was killed instead of stopping."""

from __future__ import annotations

import asyncio

import pytest

from corral_bus import Bus, connect
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration


async def test_close_does_not_wait_for_a_subscription_nobody_reads(bus: Bus, nats_server: NatsServer) -> None:
    unread = await bus.nc.subscribe("corral.test.unread")  # no callback: read only by next_msg()
    await bus.nc.publish("corral.test.unread", b"left behind")
    await bus.nc.flush()
    await eventually(lambda: unread.pending_msgs == 1, within=5, what="the message queued, unread")
    # A drain would block on this message until its 30 s timeout; the bound only catches that hang.
    # Not wait_for: cancelling a drain makes nats-py's close return normally, hiding the hang.
    closing = asyncio.ensure_future(bus.close())
    done, _ = await asyncio.wait({closing}, timeout=10)
    await closing
    assert closing in done, "close waited on a message nobody will read"
    assert bus.nc.is_closed


async def test_what_was_published_before_close_arrives(bus: Bus, nats_server: NatsServer) -> None:
    receiver = await connect(nats_server.url, name="receiver")
    try:
        got = await receiver.nc.subscribe("corral.test.last")
        await receiver.nc.flush()
        for i in range(100):
            await bus.nc.publish("corral.test.last", str(i).encode())
        await bus.close()
        # a lost message fails whatever the bound; it only has to outlast a loaded host's stall (CI
        # once timed out at 5 s)
        seen = [int((await got.next_msg(timeout=30)).data) for _ in range(100)]
        assert seen == list(range(100))
    finally:
        await receiver.close()
