"""The token bucket: burst first, then exactly `qps`, fair to concurrent callers."""

from __future__ import annotations

import pytest

from corral_actuator.limiter import TokenBucket, Unlimited, rate_limiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_burst_is_free_then_one_token_per_interval() -> None:
    clock = FakeClock()
    bucket = TokenBucket(50, 100, clock=clock)
    waits = [bucket.reserve() for _ in range(100)]
    assert waits == pytest.approx([0.0] * 100, abs=1e-9)
    assert bucket.reserve() == pytest.approx(0.02)
    assert bucket.reserve() == pytest.approx(0.04)


def test_long_run_rate_is_exact() -> None:
    clock = FakeClock()
    bucket = TokenBucket(50, 100, clock=clock)
    # 1 100 callers arriving at once: the last one waits for 1 000 tokens beyond the burst.
    last = max(bucket.reserve() for _ in range(1100))
    assert last == pytest.approx(1000 / 50)


def test_idle_time_banks_at_most_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, 5, clock=clock)
    for _ in range(5):
        bucket.reserve()
    clock.now += 3600  # an hour idle
    assert [bucket.reserve() for _ in range(5)] == pytest.approx([0.0] * 5, abs=1e-9)
    assert bucket.reserve() == pytest.approx(0.1)


def test_tokens_refill_with_time() -> None:
    clock = FakeClock()
    bucket = TokenBucket(10, 1, clock=clock)
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == pytest.approx(0.1)
    clock.now += 0.35
    # 0.1 s of debt was paid, 0.25 s banked but capped at one token.
    assert bucket.reserve() == pytest.approx(0.0, abs=1e-9)
    assert bucket.reserve() == pytest.approx(0.1)


async def test_acquire_waits_its_turn() -> None:
    bucket = TokenBucket(1000, 1)
    await bucket.acquire()
    await bucket.acquire()  # real sleep of ~1 ms


def test_zero_qps_means_no_limiter() -> None:
    assert isinstance(rate_limiter(0, 100), Unlimited)
    assert isinstance(rate_limiter(5, 10), TokenBucket)
    with pytest.raises(ValueError):
        TokenBucket(0, 1)
    with pytest.raises(ValueError):
        TokenBucket(1, 0)
