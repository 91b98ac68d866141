"""Where a runner's time comes from: its clocks and its sleeper, handed in from outside.

The runner's timing (when a burst is decided, when the decider's timers wake it: decision_loop.py)
is written once, against a `TimeSource`. Live it is `LIVE`: the wall clock, the monotonic clock and
asyncio's sleeps. `corral replay` hands the very same loop a `SimulatedTime` (simclock.py) whose
clocks read the recording's time and whose sleeps end when the replay moves that time on, so a
replay decides when the live runner would have, and a change to the runner's timing is a change to
the replay's too.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from corral_decision.decider import Clock


async def _wait_live(event: asyncio.Event, timeout_s: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)


@dataclass(frozen=True)
class TimeSource:
    """A runner's clocks and sleeper."""

    now: Clock
    """Wall-clock seconds since the epoch: what the decider and the bookkeeping of commands read."""
    monotonic: Clock
    """Seconds for intervals (the debounce, pruning): never jumps with the wall clock."""
    sleep: Callable[[float], Awaitable[None]]
    """Sleep this many seconds (0: yield once, so what has already arrived is taken in first)."""
    wait: Callable[[asyncio.Event, float], Awaitable[None]]
    """Until the event is set or this many seconds have passed, whichever is first."""


LIVE = TimeSource(now=time.time, monotonic=time.monotonic, sleep=asyncio.sleep, wait=_wait_live)
"""A live runner's timing."""
