"""admission.py: commands that do not say when they were made, made in the future, or by a stale leader."""

from __future__ import annotations

import pytest

from corral_actuator.admission import TermFence, timing_refusal

NOW = 1_800_000_000.0


@pytest.mark.parametrize("created_at", [0.0, -1.0])
def test_no_created_at_is_refused(created_at: float) -> None:
    reason = timing_refusal(created_at, NOW, 10.0)
    assert reason is not None and "createdAt is 0" in reason


def test_the_future_beyond_the_skew_allowance_is_refused() -> None:
    assert timing_refusal(NOW + 10.0, NOW, 10.0) is None  # exactly the allowance: clocks disagreeing
    assert timing_refusal(NOW + 9.0, NOW, 10.0) is None
    reason = timing_refusal(NOW + 10.5, NOW, 10.0)
    assert reason == "createdAt is 10.5 s in the future, beyond the clock-skew allowance of 10 s"
    assert timing_refusal(NOW + 0.5, NOW, 0.0) is not None  # allowance 0: nothing ahead of us


def test_the_past_is_expiry_s_business() -> None:
    assert timing_refusal(NOW - 3600.0, NOW, 10.0) is None


def test_a_stale_term_is_refused_per_service() -> None:
    fence = TermFence()
    assert fence.refusal("engine-upgrade", 3, fenced=False) is None
    fence.learn("engine-upgrade", 3)
    assert fence.refusal("engine-upgrade", 5, fenced=False) is None
    fence.learn("engine-upgrade", 5)
    assert fence.newest("engine-upgrade") == 5
    assert fence.refusal("engine-upgrade", 4, fenced=False) == "stale leader term 4 < 5"
    assert fence.refusal("engine-upgrade", 5, fenced=False) is None  # the current leader goes on
    # Another service's terms are its own.
    assert fence.refusal("im-restart", 1, fenced=False) is None
    assert fence.newest("im-restart") == 0 and fence.newest("v2-upgrade") == 0


def test_term_zero_is_unfenced_and_refused_only_where_the_policy_fences() -> None:
    fence = TermFence()
    fence.learn("engine-upgrade", 7)
    assert fence.refusal("engine-upgrade", 0, fenced=False) is None
    fence.learn("engine-upgrade", 0)
    assert fence.newest("engine-upgrade") == 7  # an unfenced command teaches nothing
    reason = fence.refusal("engine-upgrade", 0, fenced=True)
    assert reason is not None and "fences engine-upgrade" in reason
    assert fence.refusal("engine-upgrade", 8, fenced=True) is None


def test_only_a_newer_term_is_learned() -> None:
    fence = TermFence()
    fence.learn("s", 9)
    fence.learn("s", 2)
    assert fence.newest("s") == 9
    assert fence.refusal("s", 2, fenced=False) == "stale leader term 2 < 9"
