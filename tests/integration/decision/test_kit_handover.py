"""The kit's own guarantees, shown on a toy decider written against the kit alone (toy.py): a leader
publishes within its limit and counts its commands as expectations; a standby stays warm and
publishes nothing; a new leader adopts its predecessor's queued commands before it decides, so
the limit holds across the handover; results and the view settle expectations.

There is no actuator here: the test plays it, publishing results and the objects' new state."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral_bus import Bus
from corral_model.envelopes import Outcome
from corral_model.longhorn import ObjectMeta, Setting
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen, report
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.services import decision_replica
from tests.integration.decision.toy import LIMIT, TOY

pytestmark = pytest.mark.integration
NAMES = [f"s{i}" for i in range(5)]


@pytest.fixture
async def cluster(bus: Bus) -> AsyncIterator[FakeWatcher]:
    watcher = FakeWatcher(bus)
    await watcher.put(
        *(Setting(metadata=ObjectMeta(name=n, namespace="longhorn-system"), value="x") for n in NAMES)
    )
    await watcher.resync(["setting"])
    yield watcher


async def test_a_leader_publishes_within_its_limit_and_expects_what_it_published(
    bus: Bus, nats_server: NatsServer, cluster: FakeWatcher
) -> None:
    async with commands_seen(bus, "toy") as seen:
        leader = decision_replica(TOY, nats_server.url, "a")
        try:
            await eventually(lambda: len(seen) >= LIMIT, within=60, what="the first commands")
            assert leader.runner is not None
            assert [c.target.name for _, c in seen] == NAMES[:LIMIT]
            assert {p.command_id for p in leader.runner.decider.expectations()} == {c.id for _, c in seen}
            assert seen[0][0].subject == "lh.cmd.toy.setting.longhorn-system.s0"

            # The actuator applies s0 and the watcher shows it: the slot goes to s2, and only to s2.
            first = seen[0][1]
            await report(bus, first, Outcome.APPLIED, "setting", resource_version="999")
            await cluster.put(
                Setting(metadata=ObjectMeta(name="s0", namespace="longhorn-system"), value="done")
            )
            await eventually(lambda: len(seen) >= LIMIT + 1, within=30, what="the freed slot used")
            # A refusal frees a slot too; the toy decides again at once, and s1 comes first by name.
            await report(bus, seen[1][1], Outcome.PRECONDITION_FAILED, "setting")
            await eventually(lambda: len(seen) >= LIMIT + 2, within=30, what="the refused slot used")
            assert [c.target.name for _, c in seen[LIMIT:]] == ["s2", "s1"]
            assert len(list(leader.runner.decider.expectations())) == LIMIT
        finally:
            await leader.stop()


async def test_a_new_leader_adopts_its_predecessors_commands_and_keeps_the_limit(
    bus: Bus, nats_server: NatsServer, cluster: FakeWatcher
) -> None:
    async with commands_seen(bus, "toy") as seen:
        a = decision_replica(TOY, nats_server.url, "a")
        await eventually(lambda: a.ready, within=60, what="A to lead")
        b = decision_replica(TOY, nats_server.url, "b")
        try:
            await eventually(lambda: len(seen) >= LIMIT, within=30, what="A's commands")
            await eventually(lambda: b.bootstrapped, within=60, what="B warm")
            assert b.runner is not None and not b.ready  # a warm standby publishes nothing
            issued_by_a = {c.id for _, c in seen}

            await a.stop()  # releases the lease: B takes over at once
            await eventually(lambda: b.ready and b.runner is not None and b.runner._taken_over, within=30)
            assert b.runner is not None
            # B counts A's queued commands: nothing new goes out (a republished identical decision
            # has the same id, which JetStream stores once).
            assert {p.command_id for p in b.runner.decider.expectations()} == issued_by_a
            assert b.runner.metrics.adopted._value.get() >= LIMIT
            assert {c.id for _, c in seen} == issued_by_a

            # Once A's first command shows in the view, B hands the slot to the next setting.
            first = seen[0][1]
            await report(bus, first, Outcome.APPLIED, "setting", resource_version="999")
            await cluster.put(
                Setting(
                    metadata=ObjectMeta(name=first.target.name, namespace="longhorn-system"), value="done"
                )
            )
            await eventually(lambda: {c.target.name for _, c in seen} == set(NAMES[: LIMIT + 1]), within=30)
            assert len(list(b.runner.decider.expectations())) == LIMIT
            # Fencing: each leader's commands carry its lease term, and B's is the newer.
            new = next(c for _, c in seen if c.target.name == NAMES[LIMIT])
            assert new.term > seen[0][1].term > 0
        finally:
            await b.stop()
            await a.stop()
