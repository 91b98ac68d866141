"""The decision span on the in-memory bus: a child of the event that led to the command, carrying
the command's target, reason and preconditions, and named by the command's `traceparent`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import pytest
from nats.aio.msg import Msg
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from corral_bus import Bus
from corral_decision import DecisionConfig, DecisionRunner
from corral_model.longhorn import ObjectMeta, Setting
from corral_runtime.logs import get_logger
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen
from tests.fixtures.processes import eventually
from tests.integration.decision.toy import LIMIT, TOY, ToyDecider

NS = "longhorn-system"


def _setting(name: str, value: str) -> Setting:
    return Setting(metadata=ObjectMeta(name=name, namespace=NS), value=value)


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exported: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    return provider


@contextlib.asynccontextmanager
async def leading(bus: Bus, provider: TracerProvider) -> AsyncIterator[DecisionRunner]:
    """A toy replica that leads from the start, its spans going to `provider`."""
    config = msgspec.convert({"service": "toy", "instance": "unit", "debounce_s": 0.0}, DecisionConfig)
    runner = DecisionRunner(
        TOY,
        bus,
        config,
        get_logger(service="toy"),
        decider=ToyDecider(clock=lambda: 0.0),
        tracer=provider.get_tracer("corral.toy"),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    try:
        yield runner
    finally:
        stop.set()
        runner.leadership_changed(True)
        async with asyncio.timeout(10):
            await task


@pytest.fixture
async def leader(fake_bus: Bus, provider: TracerProvider) -> AsyncIterator[DecisionRunner]:
    async with leading(fake_bus, provider) as runner:
        yield runner


def _decisions(exported: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    spans = exported.get_finished_spans()
    return {
        str((s.attributes or {})["corral.target"]).rsplit("/", 1)[1]: s
        for s in spans
        if s.name == "decide Setting"
    }


def _traceparent_names(span: ReadableSpan, msg: Msg) -> bool:
    context = span.get_span_context()
    assert context is not None
    return (
        (msg.headers or {})
        .get("traceparent", "")
        .startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    )


async def test_a_command_is_a_child_of_its_targets_event_and_carries_its_span(
    fake_bus: Bus, provider: TracerProvider, exported: InMemorySpanExporter, leader: DecisionRunner
) -> None:
    watcher = FakeWatcher(fake_bus, namespace=NS, tracer=provider.get_tracer("watcher"))
    await watcher.put(_setting("s0", "done"))
    await watcher.resync(["setting"])
    await eventually(lambda: leader.bootstrapped.is_set(), within=5, what="bootstrapped")
    async with commands_seen(fake_bus, "toy") as seen:
        await watcher.put(_setting("s0", "x"))  # the toy sets it to "done": one command on s0
        await eventually(lambda: "s0" in _decisions(exported), within=5, what="the decision span")
        await eventually(lambda: len(seen) == 1, within=5, what="the command")
    [(msg, command)] = seen
    decision = _decisions(exported)["s0"]
    event = watcher.spans["s0"][-1].get_span_context()
    assert decision.parent is not None
    assert (decision.parent.trace_id, decision.parent.span_id) == (event.trace_id, event.span_id)
    attributes = decision.attributes or {}
    assert attributes["corral.target"] == "Setting/longhorn-system/s0"
    assert attributes["corral.command.id"] == command.id
    assert attributes["corral.changes"] == ('/value = "done"',)
    assert attributes["corral.preconditions"] == ()
    assert attributes["corral.reason"] == command.reason
    assert attributes["corral.trigger"] == "target"
    assert _traceparent_names(decision, msg)


async def test_a_command_without_an_event_of_its_own_joins_the_event_that_freed_its_slot(
    fake_bus: Bus, provider: TracerProvider, exported: InMemorySpanExporter, leader: DecisionRunner
) -> None:
    watcher = FakeWatcher(fake_bus, namespace=NS, tracer=provider.get_tracer("watcher"))
    names = [f"s{i}" for i in range(LIMIT + 1)]
    await watcher.put(*(_setting(n, "x") for n in names))
    await watcher.resync(["setting"])
    # The first decision takes LIMIT of them; the last one waits for a slot.
    await eventually(lambda: len(_decisions(exported)) == LIMIT, within=5, what="the first decisions")
    waiting = names[-1]
    assert waiting not in _decisions(exported)
    await watcher.put(_setting(names[0], "done"))  # s0 is done: its slot goes to the waiting one
    await eventually(lambda: waiting in _decisions(exported), within=5, what="the waiting one decided")
    decision = _decisions(exported)[waiting]
    freed = watcher.spans[names[0]][-1].get_span_context()
    assert decision.parent is not None
    assert decision.parent.span_id == freed.span_id
    assert (decision.attributes or {})["corral.trigger"] == "event"
    assert (decision.attributes or {})["corral.trigger.object"] == f"setting.{NS}.{names[0]}"


async def test_a_decision_from_the_bootstrapped_view_starts_a_trace_of_its_own(
    fake_bus: Bus, provider: TracerProvider, exported: InMemorySpanExporter
) -> None:
    """The snapshot's changes were decided on when they happened: a replica's first round on it is
    not theirs to join."""
    watcher = FakeWatcher(fake_bus, namespace=NS, tracer=provider.get_tracer("watcher"))
    await watcher.put(_setting("s0", "x"))
    await watcher.resync(["setting"])
    async with leading(fake_bus, provider):
        await eventually(lambda: "s0" in _decisions(exported), within=5, what="the first decision")
    decision = _decisions(exported)["s0"]
    assert decision.parent is None
    assert (decision.attributes or {})["corral.trigger"] == "none"


async def test_without_a_tracer_the_runner_keeps_no_trace_state(fake_bus: Bus) -> None:
    config = msgspec.convert({"service": "toy", "instance": "unit"}, DecisionConfig)
    runner = DecisionRunner(TOY, fake_bus, config, get_logger(service="toy"))
    assert runner.traces is None
