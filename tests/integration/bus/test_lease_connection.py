"""A lease holder that loses its connection stops leading at once, and leads again only by a
compare-and-set over its new connection; a standby takes over well under the TTL when the holder's
connection is gone (corral_bus.liveness: a killed process, a reset connection), and only then: a
frozen holder keeps its connection and is replaced by the TTL rule alone.

At the decision services' default TTL, on a real server: the holder runs behind a TCP proxy whose
connections the test cuts, or as a process of its own that the test kills or freezes.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator

import msgspec
import pytest

from corral_bus import Bus, connect
from corral_bus.lease import LEASE_BUCKET, Lease, LeaseRecord, fast_failover, worst_failover
from corral_decision import DecisionConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.tcp_cut import CuttableProxy
from tests.integration.bus.test_lease import Watch

pytestmark = [
    pytest.mark.integration,
    pytest.mark.real_nats("a TCP connection cut under the client, and holders as processes of their own"),
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


async def test_a_holder_cut_off_is_replaced_well_under_the_ttl_and_stays_standby_when_back(
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
        assert took <= fast_failover(TTL) + SLACK_S, f"took {took:.2f}s"

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


_HOLDER = """
import asyncio, sys
from corral_bus import connect
from corral_bus.lease import Lease

async def main(url: str, name: str, holder: str, ttl: str) -> None:
    bus = await connect(url, name=holder)
    say = lambda led: print("leader" if led else "standby", flush=True)
    await Lease(bus, name, holder, ttl=float(ttl), on_change=say).start()
    await asyncio.Event().wait()

asyncio.run(main(*sys.argv[1:]))
"""


class HolderProcess:
    """A lease holder in a process of its own, saying each change of its leadership on stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, url: str, holder: str) -> HolderProcess:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", _HOLDER, url, NAME, holder, str(TTL), stdout=asyncio.subprocess.PIPE
        )
        return cls(proc)

    async def said(self) -> str:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        return line.decode().strip()

    async def end(self) -> None:
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        await self.proc.wait()


async def test_a_holder_killed_is_replaced_well_under_the_ttl(bus: Bus, nats_server: NatsServer) -> None:
    holder = await HolderProcess.start(nats_server.url, "a")
    bus_b = await connect(nats_server.url, name="replica-b")
    b = Lease(bus_b, NAME, "b", ttl=TTL)
    try:
        assert await holder.said() == "leader"
        await b.start()
        assert not b.is_leader
        await _renewed_twice(bus)
        holder.proc.kill()
        killed = time.monotonic()
        await eventually(lambda: b.is_leader, within=2 * TTL, what="standby took over")
        took = time.monotonic() - killed
        assert took <= fast_failover(TTL) + SLACK_S, f"took {took:.2f}s"
    finally:
        await holder.end()
        await b.stop()
        await bus_b.close()


async def test_a_frozen_holder_is_replaced_by_the_ttl_rule_only(bus: Bus, nats_server: NatsServer) -> None:
    """SIGSTOP: its connection stays open, nothing answers; the probe proves nothing and the standby
    waits out the TTL. Thawed, the old holder finds itself deposed."""
    holder = await HolderProcess.start(nats_server.url, "a")
    bus_b = await connect(nats_server.url, name="replica-b")
    b = Lease(bus_b, NAME, "b", ttl=TTL)
    try:
        assert await holder.said() == "leader"
        await b.start()
        await _renewed_twice(bus)
        holder.proc.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        await eventually(lambda: b.is_leader, within=2 * TTL, what="standby took over")
        took = time.monotonic() - frozen
        # The holder's last renewal was at most a renewal period (and its round trip) before it froze.
        earliest = 0.85 * TTL - b.renew_every - 0.1
        assert earliest <= took <= worst_failover(TTL) + SLACK_S, f"took {took:.2f}s"
        assert b._silent_revision > 0, "the standby never asked the frozen holder"
        holder.proc.send_signal(signal.SIGCONT)
        assert await holder.said() == "standby"
    finally:
        await holder.end()
        await b.stop()
        await bus_b.close()
