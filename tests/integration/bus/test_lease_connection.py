"""A lease holder that loses its connection stops leading at once, and leads again only by a
compare-and-set over its new connection: it resumes when nobody took over, and stays a standby
when somebody did.

At the decision services' default TTL, on a real server: the holder runs behind a TCP proxy whose
connections the test cuts.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import msgspec
import pytest

from corral_bus import Bus, connect
from corral_bus.lease import LEASE_BUCKET, Lease, LeaseRecord, worst_failover
from corral_decision import DecisionConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.tcp_cut import CuttableProxy
from tests.integration.bus.test_lease import Watch

pytestmark = [
    pytest.mark.integration,
    pytest.mark.real_nats("a TCP connection cut under the client"),
]

TTL = DecisionConfig().lease_ttl_s
NAME = "im-restart"
SLACK_S = 0.3
"""NATS round trips and a busy shared machine, beyond what the bounds count."""

Changes = list[tuple[str, bool, float]]


@pytest.fixture
async def proxy(nats_server: NatsServer) -> AsyncIterator[CuttableProxy]:
    cuttable = CuttableProxy(nats_server.url)
    await cuttable.start()
    yield cuttable
    await cuttable.close()


async def _renewed_twice(bus: Bus) -> None:
    kv = await bus.js.key_value(LEASE_BUCKET)
    first = (await kv.get(NAME)).revision or 0

    async def moved() -> bool:
        return ((await kv.get(NAME)).revision or 0) >= first + 2

    await eventually(moved, within=4 * TTL, what="two renewals")


async def test_a_holder_cut_off_is_replaced_and_stays_standby_when_back(
    bus: Bus, nats_server: NatsServer, proxy: CuttableProxy
) -> None:
    changes: Changes = []
    bus_a = await connect(proxy.url, name="replica-a")
    bus_b = await connect(nats_server.url, name="replica-b")
    a = Lease(bus_a, NAME, "a", ttl=TTL, on_change=lambda led: changes.append(("a", led, time.monotonic())))
    b = Lease(bus_b, NAME, "b", ttl=TTL, on_change=lambda led: changes.append(("b", led, time.monotonic())))
    try:
        await a.start()
        await b.start()
        assert a.is_leader and not b.is_leader
        await _renewed_twice(bus)
        watch = Watch(a, b)
        await proxy.cut()  # the server sees the holder's connection reset, as after a kill -9
        cut = time.monotonic()
        await eventually(lambda: b.is_leader, within=2 * TTL, what="standby took over")
        took = time.monotonic() - cut
        assert not a.is_leader
        lost = [at for who, led, at in changes if who == "a" and not led]
        assert lost and lost[0] - cut < 0.2, "the holder did not step down as its connection went"
        assert took <= worst_failover(TTL) + SLACK_S, f"took {took:.2f}s"

        await proxy.heal()
        await eventually(lambda: bus_a.is_connected, within=10, what="the old holder reconnected")
        await asyncio.sleep(4 * a.poll_every)  # a few of its polls: each finds the lease taken
        await watch.stop()
        assert watch.overlaps == 0 and watch.samples > 50
        assert b.is_leader and not a.is_leader
        assert [(who, led) for who, led, _ in changes] == [("a", True), ("a", False), ("b", True)]
    finally:
        await a.stop(release=False)
        await b.stop()
        await bus_a.close()
        await bus_b.close()


async def test_a_holder_back_before_anyone_took_over_resumes_by_compare_and_set(
    bus: Bus, proxy: CuttableProxy
) -> None:
    changes: Changes = []
    bus_a = await connect(proxy.url, name="replica-a")
    a = Lease(bus_a, NAME, "a", ttl=TTL, on_change=lambda led: changes.append(("a", led, time.monotonic())))
    try:
        await a.start()
        term = a.term
        assert a.is_leader and term > 0
        await proxy.cut()
        cut = time.monotonic()
        await eventually(lambda: not a.is_leader, within=0.2, what="is_leader false as the connection went")
        await eventually(lambda: len(changes) == 2, within=1.0, what="the holder stepping down")
        assert changes[1][1] is False and changes[1][2] - cut < 0.2
        await proxy.heal()
        await eventually(lambda: a.is_leader, within=10, what="the holder leading again")
        assert a.term > term, "it resumed without a compare-and-set over the new connection"
        kv = await bus.js.key_value(LEASE_BUCKET)
        entry = await kv.get(NAME)
        assert msgspec.json.decode(entry.value or b"", type=LeaseRecord).holder == "a"
        assert [led for _, led, _ in changes] == [True, False, True]
    finally:
        await a.stop()
        await bus_a.close()
