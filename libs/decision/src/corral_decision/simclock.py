"""The time of `corral replay`: the recording's clock, and a sleeper that the replay moves on.

A decider is pure and reads time only from the clock it was built with (decider.py), so a recorded
bundle replays the same way every time when the clock is set from the messages' stream times. The
clock never goes back: streams are stamped by one server, but lines of different streams (or a
command recorded live) may be a hair out of order, and a decider's timers assume time moves forward.

The runner's own timing (decision_loop.py) sleeps and waits through a `TimeSource` (time_source.py).
`SimulatedTime` is one on this clock: the replay starts the runner's loop on it as a plain
coroutine (no event loop, so nothing depends on the machine's speed), and each sleep or wait
suspends it until the replay moves time past its end (`run_until`), or past the moment its event
was set. Ending only *past* a moment is the live runner's "yield once": what arrives at the very
moment a pass was due is taken in before that pass.

A loop that makes no progress in simulated time (a decider whose timer stays in the past, which
would keep a live runner busy) is left waiting for the next line after `SPIN_LIMIT` passes at one
instant, so a replay always ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

from corral_decision.time_source import TimeSource

SPIN_LIMIT = 100
"""Resumptions at one instant after which a loop is taken to be spinning on a past timer."""


class SimulatedClock:
    """A `Clock` (call it for seconds since the epoch) moved only by `advance_to`."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def __call__(self) -> float:
        return self._now

    @property
    def now(self) -> float:
        return self._now

    def advance_to(self, moment: float) -> float:
        """Move to `moment` unless that is in the past; returns the time now."""
        if moment > self._now:
            self._now = moment
        return self._now


class _Suspension:
    """A sleep (no event) or a wait on simulated time, handed to the `SimulatedTime` driving it."""

    def __init__(self, issued: float, deadline: float, event: asyncio.Event | None) -> None:
        self.issued = issued
        self.deadline = deadline
        self.event = event

    def ends_at(self, now: float) -> float:
        """When it ends: at its deadline, or now if its event is set (events are set only at the
        clock's time, between `run_until`s)."""
        if self.event is not None and self.event.is_set():
            return min(now, self.deadline)
        return self.deadline

    def owed(self) -> bool:
        """A pass is owed to what was fed: a debounce under way, or a wake not yet taken."""
        return self.event is None or self.event.is_set()

    def __await__(self) -> Generator[_Suspension, None, None]:
        yield self


class SimulatedTime:
    """A `TimeSource` on a `SimulatedClock`, and the driver of the one coroutine that sleeps on it."""

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock
        self.timing = TimeSource(now=clock, monotonic=clock, sleep=self._sleep, wait=self._wait)
        self._running: Coroutine[Any, Any, None] | None = None
        self._suspended: _Suspension | None = None

    def _sleep(self, seconds: float) -> _Suspension:
        now = self.clock()
        return _Suspension(now, now + max(0.0, seconds), None)

    def _wait(self, event: asyncio.Event, seconds: float) -> _Suspension:
        now = self.clock()
        return _Suspension(now, now + max(0.0, seconds), event)

    @property
    def started(self) -> bool:
        return self._running is not None

    def start(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run `coroutine` (it may await only this timing) up to its first sleep or wait."""
        self._running = coroutine
        self._resume()

    def run_until(self, moment: float) -> None:
        """Let the coroutine run as it would have until `moment`, then set the clock to it. What
        ends exactly at `moment` ends first only if it began before: a yield made at `moment`
        waits for what arrives at `moment`."""
        spins = 0
        while (suspended := self._suspended) is not None:
            ends = suspended.ends_at(self.clock())
            if ends > moment or (ends == moment and suspended.issued >= moment):
                break
            spins = spins + 1 if ends == self.clock() else 0
            if spins > SPIN_LIMIT:
                break
            self.clock.advance_to(ends)
            self._resume()
        self.clock.advance_to(moment)

    def settle(self, limit: float | None = None) -> None:
        """Run what is owed to what was fed (a debounce under way, a wake not taken), never past
        `limit`: a debounce that would end later is cut short there. Timers are not run."""
        spins = 0
        while (suspended := self._suspended) is not None and suspended.owed():
            ends = suspended.ends_at(self.clock())
            if limit is not None:
                ends = min(ends, limit)
            spins = spins + 1 if ends <= self.clock() else 0
            if spins > SPIN_LIMIT:
                break
            self.clock.advance_to(ends)
            self._resume()

    def close(self) -> None:
        """Abandon the coroutine where it waits (the recording ends)."""
        if self._running is not None:
            self._running.close()
        self._running = self._suspended = None

    def _resume(self) -> None:
        assert self._running is not None
        try:
            suspended = self._running.send(None)
        except StopIteration:
            self._running = self._suspended = None
            return
        if not isinstance(suspended, _Suspension):
            raise TypeError(f"a coroutine on simulated time awaited {suspended!r}, not its timing")
        self._suspended = suspended
