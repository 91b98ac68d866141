"""Simulated time (simclock.py): a coroutine's sleeps and waits end when the replay moves the clock
past them, a yield lets what arrives at the same instant in first, what is owed to fed lines is
settled at the end (never past a limit), and a loop spinning on a past timer cannot hang a replay."""

from __future__ import annotations

import asyncio
from collections.abc import Generator

import pytest

from corral_decision.simclock import SPIN_LIMIT, SimulatedClock, SimulatedTime


def _time(start: float = 0.0) -> SimulatedTime:
    return SimulatedTime(SimulatedClock(start))


def test_sleeps_end_as_time_is_moved_past_them() -> None:
    time = _time()
    woke: list[float] = []

    async def ticking() -> None:
        while True:
            await time.timing.sleep(1.0)
            woke.append(time.clock())

    time.start(ticking())
    time.run_until(3.5)
    assert woke == [1.0, 2.0, 3.0] and time.clock() == 3.5


def test_a_yield_waits_for_what_arrives_at_the_same_instant() -> None:
    time = _time(5.0)
    woke: list[float] = []

    async def yielding() -> None:
        await time.timing.sleep(0)
        woke.append(time.clock())

    time.start(yielding())
    time.run_until(5.0)  # a line at 5.0 comes first
    assert woke == [] and time.started
    time.run_until(5.5)
    assert woke == [5.0] and not time.started


def test_a_wait_ends_when_its_event_is_set_or_at_its_deadline() -> None:
    time = _time()
    event = asyncio.Event()
    woke: list[tuple[float, bool]] = []

    async def waiting() -> None:
        while True:
            await time.timing.wait(event, 10.0)
            woke.append((time.clock(), event.is_set()))
            event.clear()

    time.start(waiting())
    time.run_until(2.0)
    event.set()  # set at 2.0, as a line at 2.0 does
    time.run_until(4.0)
    time.run_until(20.0)
    assert woke == [(2.0, True), (12.0, False)]


def test_settle_runs_what_is_owed_never_past_the_limit_and_no_timers() -> None:
    time = _time()
    event = asyncio.Event()
    woke: list[float] = []

    async def debouncing() -> None:
        while True:
            await time.timing.wait(event, 3.0)
            event.clear()
            await time.timing.sleep(1.0)
            woke.append(time.clock())

    time.start(debouncing())
    event.set()
    time.settle()
    assert woke == [1.0]  # the wake and its debounce; the timer at 4.0 is not run
    event.set()
    time.settle(limit=1.5)
    assert woke == [1.0, 1.5]  # the debounce, cut short at the limit


def test_a_loop_spinning_at_one_instant_is_left_waiting() -> None:
    time = _time()
    rounds = [0]

    async def spinning() -> None:
        while True:
            rounds[0] += 1
            await time.timing.wait(asyncio.Event(), 0.0)  # a timer that stays in the past

    time.start(spinning())
    time.run_until(1.0)
    assert SPIN_LIMIT <= rounds[0] <= SPIN_LIMIT + 2 and time.clock() == 1.0


class _Foreign:
    """What another event loop's future would hand its driver."""

    def __await__(self) -> Generator[str, None, None]:
        yield "an asyncio future"


def test_awaiting_anything_but_its_timing_is_refused() -> None:
    async def foreign() -> None:
        await _Foreign()

    with pytest.raises(TypeError, match="not its timing"):
        _time().start(foreign())
