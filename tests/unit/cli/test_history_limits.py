"""What a replay from the bus's history says it cannot reproduce (corral_cli.events.history)."""

from __future__ import annotations

from corral_cli.events.history import HistoryWindow

S = 1_000_000_000


def test_a_whole_history_is_said_whole_and_an_expired_one_is_said_cut() -> None:
    whole = HistoryWindow(first_ns=100 * S, since_ns=50 * S)
    (said,) = whole.limits()
    assert "nothing has expired from it since, so it is whole from there" in said
    assert "cannot" not in said
    cut = HistoryWindow(first_ns=100 * S, since_ns=50 * S, expired=True, seeded=3)
    window, seeded = cut.limits()
    assert "older messages expired" in window and "cannot be replayed or compared" in window
    assert seeded.startswith("3 objects did not change during the history")
    assert HistoryWindow(first_ns=100 * S, since_ns=150 * S).limits() == []
    assert HistoryWindow().limits() == ["the history (LH_HISTORY) is empty: there is nothing to replay"]
