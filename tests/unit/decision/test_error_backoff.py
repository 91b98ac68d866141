"""A write the API server failed (`error`: 429s or 500s past the actuator's own retries) is tried
again after `error_backoff`, doubled per attempt, not after a refusal's `retry_backoff`: nothing in
view changes when the API server recovers, so an idle target waited the whole 120 s (the explorer's
im-restart/busy/instance-starting-mid-delete: a pod delete throttled 5 s, then 2 minutes idle)."""

from __future__ import annotations

from corral_decision.expectations import Expectations, TargetTrack
from corral_decision.timing import Timing
from corral_model.envelopes import CommandResult, FieldValue, Outcome, Target, Verb, new_command

TARGET = Target(kind="Pod", namespace="longhorn-system", name="instance-manager-1")
KEY = ("Pod", "longhorn-system", "instance-manager-1")
TIMING = Timing(retry_backoff=120.0, error_backoff=5.0)


def held_for(expected: Expectations[tuple[str, str, str]], track: TargetTrack, outcome: Outcome) -> float:
    """Issue the decision (its next attempt), answer it with `outcome`: how long it is held."""
    command = expected.stamp(
        new_command(
            service="im-restart",
            verb=Verb.DELETE,
            target=TARGET,
            preconditions=(FieldValue(path="/x", value=1),),
        )
    )
    expected.issue(track, KEY, command, 7, 100.0)
    answer = CommandResult(command_id=command.id, service="im-restart", target=TARGET, outcome=outcome)
    assert expected.result(track, KEY, answer, 100.0)
    return track.hold_until - 100.0


def test_an_api_failure_is_tried_again_soon_and_backs_off_per_attempt() -> None:
    expected: Expectations[tuple[str, str, str]] = Expectations(TIMING)
    track = TargetTrack()
    assert [held_for(expected, track, Outcome.ERROR) for _ in range(7)] == [5, 10, 20, 40, 80, 120, 120]


def test_a_refusal_still_holds_for_the_retry_backoff() -> None:
    expected: Expectations[tuple[str, str, str]] = Expectations(TIMING)
    track = TargetTrack()
    for outcome in (Outcome.PRECONDITION_FAILED, Outcome.REJECTED_BY_POLICY, Outcome.EXPIRED):
        assert held_for(expected, track, outcome) == 120.0
