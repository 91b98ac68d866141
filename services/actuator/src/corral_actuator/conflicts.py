"""How often a patch refused with 409 Conflict is tried again within the same command.

A JSON Patch carries its preconditions as `test` operations, so a broken precondition comes back
as 422 and is never retried. A 409 says something else: the object moved while the server
applied the patch (an unrelated write racing ours, or an API server under contention). The
actuator then re-reads the object, and if the command's preconditions still hold on the fresh
copy, the patch is as valid as before: sending it again is the right answer. Reporting it as
`precondition-failed` instead costs the issuing service its whole retry backoff (engine-upgrade:
120 s per volume) for a decision that was never wrong.

The retries are bounded (a persistent conflict is still reported) and spaced by a short jittered
exponential backoff, so two writers racing for the same object do not collide again in lockstep.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

Sleep = Callable[[float], Awaitable[None]]
_JITTER = random.Random()


@dataclass(frozen=True, slots=True)
class ConflictRetry:
    """At most `attempts` more tries after a 409, waiting `wait_initial * 2**n` (capped at
    `wait_max`) plus up to `wait_jitter` at random before try n+1. `attempts=0`: never retried."""

    attempts: int = 4
    wait_initial: float = 0.02
    wait_max: float = 0.5
    wait_jitter: float = 0.05

    def wait(self, retry: int, rng: random.Random) -> float:
        """The pause before retry number `retry` (0-based)."""
        backoff: float = min(self.wait_max, self.wait_initial * 2.0**retry)
        return backoff + rng.uniform(0.0, self.wait_jitter)


@dataclass(slots=True)
class ConflictBudget:
    """One command's share of `ConflictRetry`: `spend()` waits and says whether to try again."""

    policy: ConflictRetry
    on_retry: Callable[[], None] = lambda: None
    sleep: Sleep = asyncio.sleep
    # One generator for every command: seeding one per command (from the OS) cost 13 µs a write.
    rng: random.Random = field(default_factory=lambda: _JITTER)
    used: int = 0

    async def spend(self) -> bool:
        """False once the attempts are used up (report the conflict); else wait, count, True."""
        if self.used >= self.policy.attempts:
            return False
        await self.sleep(self.policy.wait(self.used, self.rng))
        self.used += 1
        self.on_retry()
        return True
