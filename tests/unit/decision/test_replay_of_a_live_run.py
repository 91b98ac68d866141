"""One run, decided twice: the toy service decides live on the in-memory bus while the test plays
the actuator and the watcher, then `corral replay` reads what the bus holds and makes the very same
decisions, on the same runner timing (decision_loop.py), every command `same`."""

from __future__ import annotations

import asyncio

import msgspec

from corral_bus import Bus
from corral_cli.events.reader import snapshot
from corral_cli.events.streams import DEFAULT_SUBJECTS, filters_by_stream
from corral_decision import DecisionConfig, DecisionRunner
from corral_decision.bundle import Line, parse_time
from corral_decision.replay import Replay
from corral_model.envelopes import Outcome
from corral_model.longhorn import ObjectMeta, Setting
from corral_runtime.logs import get_logger
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen, report
from tests.fixtures.processes import eventually
from tests.integration.decision.toy import LIMIT, TOY

NS = "longhorn-system"
NAMES = [f"s{i}" for i in range(5)]
TOY_SUBJECTS = (*(s for s in DEFAULT_SUBJECTS if not s.startswith("lh.cmd")), "lh.cmd.toy.>")


def _setting(name: str, value: str) -> Setting:
    return Setting(metadata=ObjectMeta(name=name, namespace=NS), value=value)


async def _run_live(bus: Bus, watcher: FakeWatcher) -> None:
    """The toy decides live (its default configuration, as a replay reads it); each command is
    applied as the actuator and the watcher would, which frees its slot for the next setting."""
    config = msgspec.convert({"service": "toy", "instance": "unit"}, DecisionConfig)
    runner = DecisionRunner(TOY, bus, config, get_logger(service="toy"))
    stop = asyncio.Event()
    async with commands_seen(bus, "toy") as seen:
        task = asyncio.create_task(runner.run(stop))
        try:
            for applied in range(len(NAMES)):

                def decided(n: int = applied) -> bool:
                    return len(seen) > n

                await eventually(decided, within=5, what=f"command {applied + 1}")
                command = seen[applied][1]
                await report(bus, command, Outcome.APPLIED, "setting", resource_version=str(watcher.rv + 1))
                await watcher.put(_setting(command.target.name, "done"))
        finally:
            stop.set()
            async with asyncio.timeout(10):
                await task
    assert len(seen) == len(NAMES)


async def test_a_live_run_replays_to_the_same_decisions(fake_bus: Bus) -> None:
    watcher = FakeWatcher(fake_bus, namespace=NS)
    await watcher.put(*(_setting(n, "x") for n in NAMES))
    await watcher.resync(["setting"])
    await _run_live(fake_bus, watcher)

    # The toy is no sender of the contract: its commands are asked for by name.
    records = await snapshot(fake_bus, filters_by_stream(TOY_SUBJECTS))
    lines = [Line(n, record, parse_time(record.time)) for n, record in enumerate(records, start=1)]
    replayed = Replay(TOY).feed_all(lines)
    assert replayed.recorded_commands == len(NAMES) > LIMIT  # slots were freed and refilled
    assert [d.match for d in replayed.differences] == ["same"] * len(NAMES), replayed.differences
