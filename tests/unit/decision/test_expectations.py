"""The kit's expectations and timers on their own: what a command out on a target means, once for
every decider (issue, applied, refused and held, expired), and timers that never lose an ask."""

from __future__ import annotations

from corral_decision.expectations import Expectations, TargetTrack
from corral_decision.timing import Timing
from corral_model.envelopes import Command, CommandResult, Outcome, Target, Verb, new_command

TARGET = Target(kind="Setting", namespace="longhorn-system", name="s")
KEY = "s"
TIMING = Timing(command_ttl=10.0, applied_ttl=100.0, retry_backoff=30.0)


def command() -> Command:
    return new_command(service="toy", verb=Verb.PATCH, target=TARGET)


def result(sent: Command, outcome: Outcome, dry_run: bool = False) -> CommandResult:
    return CommandResult(command_id=sent.id, service="toy", target=TARGET, outcome=outcome, dry_run=dry_run)


def due(expected: Expectations[str], track: TargetTrack, now: float) -> list[str]:
    return list(expected.due(now, lambda key: track))


def test_an_issued_command_counts_until_its_ttl_and_then_wakes_its_target() -> None:
    expected: Expectations[str] = Expectations(TIMING)
    track = TargetTrack()
    expected.issue(track, KEY, command(), decided_rv=5, now=0.0)
    assert expected.count == 1 and expected.next_due(lambda key: track) == 10.0
    assert due(expected, track, 9.9) == [] and track.expectation is not None
    assert due(expected, track, 10.0) == [KEY]
    assert track.expectation is None and expected.count == 0


def test_an_applied_command_counts_until_applied_ttl_and_its_first_deadline_is_no_wake() -> None:
    expected: Expectations[str] = Expectations(TIMING)
    track = TargetTrack()
    sent = command()
    expected.issue(track, KEY, sent, decided_rv=5, now=0.0)
    assert expected.result(track, KEY, result(sent, Outcome.APPLIED), now=1.0) is False
    assert due(expected, track, 50.0) == []  # the command_ttl deadline no longer stands
    assert track.expectation is not None and track.expectation.applied
    assert expected.next_due(lambda key: track) == 101.0
    assert due(expected, track, 101.0) == [KEY] and track.expectation is None


def test_a_refusal_frees_and_holds_until_a_fresher_object_or_the_backoff() -> None:
    expected: Expectations[str] = Expectations(TIMING)
    track = TargetTrack()
    sent = command()
    expected.issue(track, KEY, sent, decided_rv=5, now=0.0)
    assert expected.result(track, KEY, result(sent, Outcome.PRECONDITION_FAILED), now=2.0) is True
    assert track.expectation is None and expected.count == 0
    assert expected.held(track, rv=5, now=31.9)
    assert not expected.held(track, rv=6, now=3.0)  # fresher state: decide again now
    assert not expected.held(track, rv=5, now=32.0)  # the backoff passed
    assert due(expected, track, 32.0) == [KEY]  # and the target is looked at again then


def test_a_dry_run_is_a_refusal_and_another_commands_result_changes_nothing() -> None:
    expected: Expectations[str] = Expectations(TIMING)
    track = TargetTrack()
    sent = command()
    expected.issue(track, KEY, sent, decided_rv=5, now=0.0)
    other = new_command(service="toy", verb=Verb.DELETE, target=TARGET)
    assert expected.result(track, KEY, result(other, Outcome.PRECONDITION_FAILED), now=1.0) is False
    assert track.expectation is not None
    assert expected.result(track, KEY, result(sent, Outcome.APPLIED, dry_run=True), now=1.0) is True
    assert track.expectation is None


def test_an_ask_again_at_a_settled_deadlines_time_is_not_lost() -> None:
    expected: Expectations[str] = Expectations(TIMING)
    track = TargetTrack()
    expected.issue(track, KEY, command(), decided_rv=5, now=0.0)  # deadline at 10
    expected.timers.at(10.0, KEY)  # the rules ask to look again at 10 too
    expected.settle(track)  # the view showed the change: the deadline no longer matters
    assert expected.next_due(lambda key: track) == 10.0
    assert due(expected, track, 10.0) == [KEY]


def test_the_same_ask_again_is_kept_once() -> None:
    expected: Expectations[str] = Expectations(TIMING)
    for _ in range(3):
        expected.timers.at(5.0, KEY)
    assert len(expected.timers) == 1


def test_a_refusal_judged_on_another_object_holds_until_that_object_moves_on() -> None:
    """A decision read the target (rv 5) and its node (rv 9): the hold is on the freshest of them,
    so the node's next change (rv 10) ends it, and the node's state at the decision does not."""
    expected: Expectations[str] = Expectations(TIMING)
    track = TargetTrack()
    sent = command()
    expected.issue(track, KEY, sent, decided_rv=5, now=0.0, judged_rv=9)
    assert expected.result(track, KEY, result(sent, Outcome.REJECTED_BY_POLICY), now=1.0) is True
    assert expected.held(track, rv=9, now=2.0)
    assert not expected.held(track, rv=10, now=2.0)
