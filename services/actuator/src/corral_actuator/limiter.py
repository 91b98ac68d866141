"""Client-side rate limiting: the actuator must never be the thing that overloads the API server.

A token bucket (rate QPS, burst tokens), as client-go's default limiter. Callers reserve the next
free slot and sleep until it, so concurrent callers are served in arrival order and the long-run
rate is exact rather than "at most": the bucket's debt is tracked as a time, not polled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class TokenBucket:
    """`await acquire()` returns when the caller may send one request."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0:
            raise ValueError("qps must be positive (use no limiter to disable limiting)")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._interval = 1.0 / qps
        # The instant at which the bucket holds zero tokens, counting every reservation made so far:
        # tokens now = (now - it) / interval, capped at burst. One number, so a reservation is O(1)
        # and needs no lock; a time in the future is debt that later callers wait out in order.
        self._empty_at = clock() - burst * self._interval

    def reserve(self) -> float:
        """Take one token; return how long the caller must wait before using it (0 when available)."""
        now = self._clock()
        # Idle time banks at most `burst` tokens.
        self._empty_at = max(self._empty_at, now - self.burst * self._interval) + self._interval
        return max(0.0, self._empty_at - now)

    async def acquire(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)


class Unlimited:
    """The limiter when limiting is off (benchmarks, or an API server with its own priority and fairness)."""

    qps = 0.0
    burst = 0

    def reserve(self) -> float:
        return 0.0

    async def acquire(self) -> None:
        return None


RateLimiter = TokenBucket | Unlimited


def rate_limiter(qps: float, burst: int) -> RateLimiter:
    """A token bucket, or no limit at all when qps ≤ 0."""
    return TokenBucket(qps, burst) if qps > 0 else Unlimited()
