"""The kit's runner and takeover on the in-memory bus (tests/fixtures/fakebus): what a replica
does and does not publish, decided in milliseconds and without a server process. The toy decider
of the kit's handover tests is the service; a spy subclass counts what the runner asked of it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from corral_bus import Bus
from corral_decision import DecisionConfig, DecisionRunner
from corral_model import codec
from corral_model.envelopes import (
    Command,
    CommandResult,
    EventType,
    ObjectEvent,
    Outcome,
    Target,
    Verb,
    new_command,
)
from corral_model.longhorn import ObjectMeta, Setting
from corral_model.subjects import command_stream
from corral_runtime.logs import get_logger
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen, report
from tests.fixtures.fakebus import FakeNatsServer
from tests.fixtures.processes import eventually
from tests.integration.decision.toy import DONE, LIMIT, TOY, ToyDecider

NS = "longhorn-system"
NAMES = [f"s{i}" for i in range(5)]


class SpyDecider(ToyDecider):
    """The toy decider, recording the runner's calls."""

    def __init__(self) -> None:
        super().__init__(clock=lambda: 0.0)
        self.decisions = 0
        self.standby_rounds = 0
        self.results: list[CommandResult] = []
        self.s0_version_at_first_decision: int | None = None

    def decide(self) -> list[Command]:
        if not self.decisions:
            self.s0_version_at_first_decision = self.observed_version(_target("s0"))
        self.decisions += 1
        return super().decide()

    def idle_work(self, budget: int) -> int:
        if budget:
            self.standby_rounds += 1
        return 0

    def record_result(self, result: CommandResult) -> None:
        self.results.append(result)
        super().record_result(result)


def _target(name: str) -> Target:
    return Target(kind="Setting", namespace=NS, name=name)


def _setting(name: str, value: str = "x") -> Setting:
    return Setting(metadata=ObjectMeta(name=name, namespace=NS), value=value)


class Replica:
    """One runner on the bus, leading or not as the test says; `start` once it is prepared."""

    def __init__(self, bus: Bus, *, leading: bool) -> None:
        self.leading = leading
        self.decider = SpyDecider()
        self.registry = CollectorRegistry()
        config = msgspec.convert({"service": "toy", "instance": "unit", "debounce_s": 0.0}, DecisionConfig)
        self.runner = DecisionRunner(
            TOY,
            bus,
            config,
            get_logger(service="toy"),
            self.registry,
            is_leader=lambda: self.leading,
            decider=self.decider,
        )
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.runner.run(self.stop))

    def lead(self) -> None:
        self.leading = True
        self.runner.leadership_changed(True)

    def metric(self, name: str) -> float:
        return self.registry.get_sample_value(f"corral_toy_{name}") or 0.0

    async def close(self) -> None:
        self.stop.set()
        self.runner.leadership_changed(self.leading)  # wakes the decision loop to see the stop
        if self.task is not None:
            async with asyncio.timeout(10):
                await self.task


@pytest.fixture
async def watcher(fake_bus: Bus) -> FakeWatcher:
    watcher = FakeWatcher(fake_bus, namespace=NS)
    await watcher.put(*(_setting(n) for n in NAMES))
    await watcher.resync(["setting"])
    return watcher


@pytest.fixture
async def replicas(fake_bus: Bus) -> AsyncIterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        await replica.close()


async def test_a_standby_keeps_its_view_warm_and_never_publishes(
    fake_bus: Bus, watcher: FakeWatcher, replicas: list[Replica]
) -> None:
    async with commands_seen(fake_bus, "toy") as seen:
        standby = Replica(fake_bus, leading=False)
        replicas.append(standby)
        standby.start()
        await eventually(lambda: standby.runner.bootstrapped.is_set(), within=5, what="bootstrapped")
        for i in range(3):  # every event wakes the loop, and every round is a standby round
            rounds, value = standby.decider.standby_rounds, f"x{i}"
            await watcher.put(_setting("s4", value))

            def warm(rounds: int = rounds, value: str = value) -> bool:
                decider = standby.decider
                return decider.values["s4"] == value and decider.standby_rounds > rounds

            await eventually(warm, within=5, what="the event applied (the view warm) and a round after it")
        assert standby.decider.decisions == 0
        assert seen == []

        standby.lead()
        await eventually(lambda: len(seen) >= LIMIT, within=5, what="the new leader's commands")
        assert [c.target.name for _, c in seen] == NAMES[:LIMIT]


async def test_a_takeover_waits_until_the_view_shows_every_reported_write(
    fake_bus: Bus, watcher: FakeWatcher, replicas: list[Replica]
) -> None:
    # The actuator wrote s0 at resourceVersion 500; the view holds s0 at 101 (the watcher lags).
    written = new_command(service="toy", verb=Verb.PATCH, target=_target("s0"), changes=DONE)
    await report(fake_bus, written, Outcome.APPLIED, "setting", resource_version="500")
    async with commands_seen(fake_bus, "toy") as seen:
        leader = Replica(fake_bus, leading=True)
        replicas.append(leader)
        polls = [0]
        prune = leader.runner.takeover.prune_seen

        def counting(force: bool) -> None:
            polls[0] += force is False
            prune(force)

        leader.runner.takeover.prune_seen = counting
        leader.start()
        await eventually(lambda: polls[0] >= 5, within=5, what="the takeover to look five times")
        assert leader.runner.takeover.lagging_writes() == ["Setting/longhorn-system/s0"]
        assert leader.decider.decisions == 0
        assert seen == []

        watcher.rv = 600
        await watcher.put(_setting("s0"))  # the watcher catches up: s0 at 601
        await eventually(lambda: len(seen) >= LIMIT, within=5, what="the first decision")
        assert leader.decider.s0_version_at_first_decision == 601
        assert leader.runner.takeover.lagging_writes() == []


async def test_a_command_jetstream_did_not_store_comes_back_as_an_error_result(
    fake_bus: Bus, fake_nats: FakeNatsServer, watcher: FakeWatcher, replicas: list[Replica]
) -> None:
    fake_nats.refuse("lh.cmd.toy.>", "insufficient resources")
    leader = Replica(fake_bus, leading=True)
    replicas.append(leader)
    leader.start()

    def refused() -> list[CommandResult]:
        return [r for r in leader.decider.results if r.outcome is Outcome.ERROR]

    await eventually(lambda: len(refused()) >= LIMIT, within=5, what="error results")
    assert {r.target.name for r in refused()} == set(NAMES[:LIMIT])
    assert all(r.detail == "not stored in LH_COMMANDS" for r in refused())
    assert leader.metric("publish_failures_total") >= LIMIT
    await eventually(lambda: not list(leader.decider.expectations()), within=5, what="slots freed")

    fake_nats.accept("lh.cmd.toy.>")
    await watcher.put(_setting("s4", "y"))  # any event: the leader decides again

    async def stored() -> bool:
        return (await fake_bus.js.stream_info(command_stream("toy"))).state.messages == LIMIT

    await eventually(stored, within=5, what="the commands stored once JetStream takes them")


async def test_an_unreadable_event_is_counted_and_skipped(fake_bus: Bus, replicas: list[Replica]) -> None:
    watcher = FakeWatcher(fake_bus, namespace=NS)
    await watcher.put(_setting("s0"))
    await fake_bus.js.publish(f"lh.obj.setting.{NS}.broken", b"\xff not an event")
    await watcher.put(_setting("s1"))
    await watcher.resync(["setting"])
    async with commands_seen(fake_bus, "toy") as seen:
        leader = Replica(fake_bus, leading=True)
        replicas.append(leader)
        leader.start()
        await eventually(lambda: len(seen) >= LIMIT, within=5, what="decisions past the bad event")
    assert leader.metric("bad_events_total") == 1
    assert sorted(leader.decider.values) == ["s0", "s1"]
    assert sorted(c.target.name for _, c in seen) == ["s0", "s1"]


def _invalid_utf8_event(name: str) -> bytes:
    """A well-formed event of the right schema whose setting value holds a byte that is not UTF-8:
    msgspec raises UnicodeDecodeError for it, not its own DecodeError."""
    event = ObjectEvent(
        type=EventType.MODIFIED,
        kind="setting",
        namespace=NS,
        name=name,
        uid=f"uid-{name}",
        resource_version="99",
        object=_setting(name, "MARK"),
    )
    encoded = codec.encode(event)
    assert b"MARK" in encoded
    return encoded.replace(b"MARK", b"\xff\xfe")


@pytest.mark.parametrize("when", ["in the bootstrap", "while following"])
async def test_an_event_with_invalid_utf8_is_skipped_and_blinds_nothing(
    fake_bus: Bus, replicas: list[Replica], when: str
) -> None:
    watcher = FakeWatcher(fake_bus, namespace=NS)
    await watcher.put(_setting("s0"))
    if when == "in the bootstrap":
        await fake_bus.js.publish(f"lh.obj.setting.{NS}.broken", _invalid_utf8_event("broken"))
    await watcher.resync(["setting"])
    async with commands_seen(fake_bus, "toy") as seen:
        leader = Replica(fake_bus, leading=True)
        replicas.append(leader)
        leader.start()
        await eventually(lambda: len(seen) >= 1, within=5, what="the first decision")
        if when == "while following":
            await fake_bus.js.publish(f"lh.obj.setting.{NS}.broken", _invalid_utf8_event("broken"))
        # The object-following task is still alive: a later event reaches the decider.
        await watcher.put(_setting("s1"))
        await eventually(lambda: len(seen) >= LIMIT, within=5, what="a decision after the bad byte")
    assert leader.metric("bad_events_total") == 1
    assert sorted(leader.decider.values) == ["s0", "s1"]
    assert leader.task is not None and not leader.task.done()
