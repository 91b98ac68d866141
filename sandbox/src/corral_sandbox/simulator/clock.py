"""Simulated time. Every duration the simulator waits is measured on a Clock, never on the event loop
directly, so a scenario can run with real (optionally accelerated) time or with fully manual time.

* `WallClock(scale)` — simulated seconds pass `scale` times faster than real ones.
* `ManualClock()` — time moves only when `advance()` is called; the basis of deterministic replays.

Timestamps written into objects (`noRefSince`, …) are `epoch + now()`: a wall clock's epoch is the
real time it started (so they line up with the API server's own timestamps), a manual clock's is a
fixed date, so a manual-clock run writes byte-identical objects every time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class Clock(Protocol):
    def now(self) -> float:
        """Simulated seconds since the clock started."""
        ...

    def real_delay(self, simulated: float) -> float | None:
        """How long to really wait for `simulated` seconds to pass; None when only advance() moves time."""
        ...

    def on_advance(self, callback: Callable[[], None]) -> None:
        """Call `callback` whenever time jumps (manual clocks); wall clocks never call it."""
        ...

    @property
    def epoch(self) -> datetime:
        """The wall-clock moment simulated time 0 stands for, in timestamps written to objects."""
        ...


def timestamp(clock: Clock) -> str:
    """RFC 3339 timestamp (seconds precision, Kubernetes style) for the clock's current time."""
    moment = clock.epoch + timedelta(seconds=clock.now())
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


class WallClock:
    def __init__(self, scale: float = 1.0) -> None:
        if scale <= 0:
            raise ValueError("clock scale must be positive")
        self._scale = scale
        self._start = time.monotonic()
        self.epoch = datetime.now(UTC).replace(microsecond=0)

    def now(self) -> float:
        return (time.monotonic() - self._start) * self._scale

    def real_delay(self, simulated: float) -> float | None:
        return max(0.0, simulated / self._scale)

    def on_advance(self, callback: Callable[[], None]) -> None:
        return None


class ManualClock:
    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self.epoch = EPOCH
        self._listeners: list[Callable[[], None]] = []

    def now(self) -> float:
        return self._now

    def real_delay(self, simulated: float) -> float | None:
        return None

    def on_advance(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time cannot go backwards")
        self._now += seconds
        for listener in self._listeners:
            listener()

    def advance_to(self, moment: float) -> None:
        self.advance(max(0.0, moment - self._now))
