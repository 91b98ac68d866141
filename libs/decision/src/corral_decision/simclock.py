"""The `Clock` a decider reads in `corral replay`: time as the recording says, never the wall clock.

A decider is pure and reads time only from the clock it was built with (decider.py), so a recorded
bundle replays the same way every time when the clock is set from the messages' stream times. The
clock never goes back: streams are stamped by one server, but lines of different streams (or a
command recorded live) may be a hair out of order, and a decider's timers assume time moves forward.
"""

from __future__ import annotations


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
