"""Leader lease: one holder at a time; a standby takes over within the TTL when the holder dies."""

from __future__ import annotations

import asyncio
import time

import pytest

from corral_bus import Bus, connect
from corral_bus.lease import Lease, worst_failover
from corral_decision import DecisionConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration

TTL = 1.5


class Watch:
    """Samples both leases continually and records any moment with two leaders."""

    def __init__(self, *leases: Lease) -> None:
        self.leases = leases
        self.overlaps = 0
        self.samples = 0
        self._task = asyncio.create_task(self._sample())

    async def _sample(self) -> None:
        while True:
            self.samples += 1
            if sum(lease.is_leader for lease in self.leases) > 1:
                self.overlaps += 1
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def test_one_holder_and_standby_takes_over_when_holder_dies(bus: Bus) -> None:
    changes: list[tuple[str, bool]] = []
    a = Lease(bus, "engine-upgrade", "a", ttl=TTL, on_change=lambda led: changes.append(("a", led)))
    b = Lease(bus, "engine-upgrade", "b", ttl=TTL, on_change=lambda led: changes.append(("b", led)))
    await a.start()
    assert a.is_leader
    await b.start()
    watch = Watch(a, b)
    # Through eight renewals (two TTLs) the holder keeps the lease and the standby stays a standby.
    first = a.revision
    await eventually(lambda: a.revision >= first + 8, within=4 * TTL, what="holder renewed")
    assert a.is_leader and not b.is_leader

    await a.stop(release=False)  # the holder dies without handing the lease back
    died = time.monotonic()
    await eventually(lambda: b.is_leader, within=3 * TTL, what="standby took over")
    took = time.monotonic() - died
    await watch.stop()
    await b.stop()
    assert took <= TTL, f"standby took {took:.2f}s, TTL is {TTL}s"
    assert watch.overlaps == 0 and watch.samples > 100
    assert changes == [("a", True), ("a", False), ("b", True), ("b", False)]


async def test_released_lease_moves_at_once(bus: Bus) -> None:
    a = Lease(bus, "setting-sync", "a", ttl=10.0)
    b = Lease(bus, "setting-sync", "b", ttl=10.0)
    await a.start()
    await b.start()
    assert a.is_leader and not b.is_leader
    released = time.monotonic()
    await a.stop()
    await eventually(lambda: b.is_leader, within=5.0, what="standby took the released lease")
    assert time.monotonic() - released < 2.0  # a poll, not a TTL
    await b.stop()


async def test_leases_of_different_services_are_independent(bus: Bus) -> None:
    a = Lease(bus, "im-restart", "pod-1", ttl=5.0)
    b = Lease(bus, "v2-upgrade", "pod-1", ttl=5.0)
    await a.start()
    await b.start()
    assert a.is_leader and b.is_leader
    await a.stop()
    await b.stop()


@pytest.mark.real_nats("a real restart (away, then 503 until its store is back) is more than the fake's")
async def test_one_leader_through_a_server_restart(bus: Bus, nats_server: NatsServer) -> None:
    bus_a = await connect(nats_server.url, name="replica-a")
    bus_b = await connect(nats_server.url, name="replica-b")
    a = Lease(bus_a, "v2-upgrade", "a", ttl=3.0)
    b = Lease(bus_b, "v2-upgrade", "b", ttl=3.0)
    await a.start()
    await b.start()
    watch = Watch(a, b)
    await asyncio.to_thread(nats_server.restart)
    await eventually(lambda: bus_a.is_connected and bus_b.is_connected, what="both reconnected")
    await eventually(lambda: a.is_leader or b.is_leader, within=10, what="a leader after the restart")
    first = (a if a.is_leader else b).revision
    leader = a if a.is_leader else b
    await eventually(lambda: leader.revision >= first + 4, within=10, what="the leader keeps renewing")
    await watch.stop()
    assert watch.overlaps == 0
    assert a.is_leader != b.is_leader
    await a.stop()
    await b.stop()
    await bus_a.close()
    await bus_b.close()


async def test_a_cut_off_holder_stops_leading_before_the_standby_leads(nats_server: NatsServer) -> None:
    """At the decision services' default TTL: the holder loses NATS (its connection closed, the
    process still running and consulting `is_leader`); it must have stopped leading before the
    standby leads, and the standby must lead within the failover bound."""
    ttl = DecisionConfig().lease_ttl_s
    bus_a = await connect(nats_server.url, name="replica-a")
    bus_b = await connect(nats_server.url, name="replica-b")
    gained: list[float] = []
    a = Lease(bus_a, "im-restart", "a", ttl=ttl)
    b = Lease(
        bus_b,
        "im-restart",
        "b",
        ttl=ttl,
        on_change=lambda led: gained.append(time.monotonic()) if led else None,
    )
    try:
        await a.start()
        await b.start()
        assert a.is_leader and not b.is_leader
        first = a.revision
        await eventually(lambda: a.revision >= first + 2, within=4 * ttl, what="holder renewed")
        watch = Watch(a, b)
        await bus_a.close()  # cut off: no renewal gets through any more
        cut = time.monotonic()
        await eventually(lambda: b.is_leader, within=4 * ttl, what="standby took over")
        await watch.stop()
        # A closed connection is found by the liveness probe in about half a second (a sample
        # every 10 ms): enough samples to have watched the handover, not a count of a TTL's worth.
        assert watch.overlaps == 0 and watch.samples >= 10
        assert not a.is_leader
        assert gained and gained[0] - cut <= worst_failover(ttl) + 0.5, f"took {gained[0] - cut:.2f}s"
    finally:
        await a.stop(release=False)
        await b.stop()
        await bus_b.close()


@pytest.mark.parametrize("swallowed_as", ["an error", "a normal return"])
async def test_stop_ends_the_renewal_even_when_a_step_swallows_the_cancel(
    bus: Bus, swallowed_as: str
) -> None:
    """nats-py answers a cancel inside a request with its own TimeoutError, and `_renew` takes that
    for a failed renewal and returns as usual; the loop renewed on, so `stop()` waited until the
    service was killed (the 30 s teardowns of the scenario stacks)."""
    lease = Lease(bus, "actuator", "a", ttl=TTL)
    await lease.start()
    inside = asyncio.Event()
    swallowing = True

    async def renewal_that_swallows_the_cancel() -> None:
        inside.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            if not swallowing:
                raise
            if swallowed_as == "an error":
                raise TimeoutError("nats: timeout") from None

    lease._step = renewal_that_swallows_the_cancel  # type: ignore[method-assign]
    await eventually(inside.is_set, within=10.0, what="the renewal under way")
    stopping = asyncio.ensure_future(lease.stop(release=False))
    done, _ = await asyncio.wait({stopping}, timeout=5)
    swallowing = False
    if not done and lease._task is not None:
        lease._task.cancel()  # the failure case: let the test end
    await stopping
    assert stopping in done, "stop() waited on a renewal loop that outlived its cancel"
