"""When a decision service decides: the runner's timing, written once for live and for replay.

A pass is rate-limited, leading edge first: a wake after a quiet spell (no pass for `debounce_s`)
is decided at once, after yielding once so that what has already arrived is taken in first, so a
freed slot is refilled without a fixed wait; wakes during a burst are decided together,
`debounce_s` after the previous pass. Between wakes the loop sleeps until the decider's next timer
(`next_due`), at most 5 s, and on a standby with deferred work, 0.5 s.

The loop reads time only from its `TimeSource` (time_source.py). The live runner (runner.py) runs it on the
wall clock with asyncio's sleeps; `corral replay` (replay.py) runs the very same loop on the
recording's clock (simclock.py). What a pass does is theirs: the runner takes over and publishes,
a replay keeps what the decider made.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from corral_decision.decider import Runnable
from corral_decision.time_source import TimeSource

IDLE_WAKE_S = 5.0
"""The longest the loop sleeps without a wake or a timer."""
STANDBY_ROUND_S = 0.5
"""How often a standby with deferred work does a round of it."""


class DecisionLoop:
    """Wakes (`wake`), debounces and times the passes of one replica: `run(stop)` until stopped."""

    def __init__(
        self,
        decider: Runnable,
        timing: TimeSource,
        *,
        debounce_s: float,
        idle_batch: int,
        wake: asyncio.Event,
        may_decide: Callable[[], bool],
        decide: Callable[[asyncio.Event], Awaitable[None]],
        stand_by: Callable[[], None] = lambda: None,
        before_pass: Callable[[], None] = lambda: None,
    ) -> None:
        self.decider = decider
        self.timing = timing
        self.debounce_s = debounce_s
        self.idle_batch = idle_batch
        self.woken = wake
        self._may_decide = may_decide
        self._decide = decide
        self._stand_by = stand_by
        self._before_pass = before_pass
        self._decided_at = -float("inf")  # timing.monotonic() of the last pass

    def wake(self) -> None:
        """Something changed: a pass is due (at once after a quiet spell, else after the debounce)."""
        self.woken.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self.timing.wait(self.woken, self.sleep_for())
            self.woken.clear()
            if stop.is_set():
                return
            self._before_pass()
            await self.debounce()
            if self._may_decide():
                await self._decide(stop)
            else:
                self._stand_by()

    async def debounce(self) -> None:
        """Leading edge: after a quiet spell decide now (yielding once, so events already received
        are applied first); within a burst, at most one decision pass per `debounce_s`."""
        since = self.timing.monotonic() - self._decided_at
        await self.timing.sleep(max(0.0, self.debounce_s - since))
        self._decided_at = self.timing.monotonic()

    def sleep_for(self) -> float:
        """Until the decider's next timer or, on a standby, a periodic round of idle work (a
        handover delay is waited in takeover.py). A leader does no idle work, so it does not ask
        how much there is: that count can be a scan of the view (engine-upgrade: every owner node)
        and this runs after every decision pass."""
        delays = [IDLE_WAKE_S]
        due = self.decider.next_due()
        if due is not None:
            delays.append(max(0.0, due - self.timing.now()))
        if self.idle_batch and not self._may_decide() and self.decider.idle_work(0):
            delays.append(STANDBY_ROUND_S)
        return min(delays)
