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
from corral_decision.decided_on import DECIDED_ON_HEADER
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


async def test_the_live_passes_are_replayed_even_when_stream_time_cannot_tell_them_apart(
    fake_bus: Bus,
) -> None:
    """A live pass takes in what has arrived, which stream time does not record: here every line
    is stamped with one instant, so a replay on the timing takes each burst in one pass and decides
    otherwise, while the replay that follows the passes the commands name decides as the live did.
    Without those names (an older release), or with a command held only as its result, it says it
    falls back to the timing."""
    watcher = FakeWatcher(fake_bus, namespace=NS)
    await watcher.put(*(_setting(n, "x") for n in NAMES))
    await watcher.resync(["setting"])
    await _run_live(fake_bus, watcher)
    records = await snapshot(fake_bus, filters_by_stream(TOY_SUBJECTS))
    instant = parse_time(records[0].time)
    lines = [Line(n, record, instant) for n, record in enumerate(records, start=1)]

    on_timing = Replay(TOY, debounce_s=TOY.config().debounce_s).feed_all(lines)
    assert on_timing.recorded_passes == 0
    assert not on_timing.matches, on_timing.differences

    paced = Replay(TOY).feed_all(lines)
    live_passes = {r.headers[DECIDED_ON_HEADER] for r in records if r.subject.startswith("lh.cmd.")}
    assert paced.recorded_passes == len(live_passes) > 1  # slots freed and refilled
    assert [d.match for d in paced.differences] == ["same"] * len(NAMES), paced.differences

    unmarked = [
        Line(line.number, msgspec.structs.replace(line.entry, headers={}), line.time_ns)
        if line.entry.subject.startswith("lh.cmd.")
        else line
        for line in lines
    ]
    older = Replay(TOY).feed_all(unmarked)
    assert older.recorded_passes == 0
    assert any("do not name the input" in limit for limit in older.limits), older.limits

    first_command = next(line for line in lines if line.entry.subject.startswith("lh.cmd."))
    result_only = Replay(TOY).feed_all([line for line in lines if line is not first_command])
    assert result_only.recorded_passes == 0
    assert any("commands held only as their results (1)" in limit for limit in result_only.limits), (
        result_only.limits
    )
