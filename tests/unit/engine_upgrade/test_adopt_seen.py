"""SeenCommands (adoption.py): what a replica remembers of its service's commands and results, to
adopt them at takeover; bounded by the command TTL, not by the cluster's size."""

from __future__ import annotations

from corral_decision.seen import SeenCommands
from corral_model.envelopes import Command, CommandResult, FieldValue, Outcome, Target, Verb, new_command

NOW = 1_800_000_000.0
TTL = 60.0


def command(name: str, created_at: float = NOW) -> Command:
    return new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace="ns", name=name),
        changes=(FieldValue(path="/spec/image", value="new"),),
        preconditions=(FieldValue(path="/spec/image", value="old"),),
        created_at=created_at,
    )


def result(
    of: Command, outcome: Outcome, *, finished_at: float = NOW, rv: str = "7", dry_run: bool = False
) -> CommandResult:
    return CommandResult(
        command_id=of.id,
        service=of.service,
        target=of.target,
        outcome=outcome,
        resource_version=rv,
        finished_at=finished_at,
        dry_run=dry_run,
    )


def test_recent_commands_are_adoptable_with_their_applied_result() -> None:
    seen = SeenCommands(TTL)
    a, b = command("a"), command("b")
    assert seen.command(a, NOW) and seen.command(b, NOW)
    seen.result(result(b, Outcome.APPLIED), NOW)
    assert sorted((c.target.name, r.outcome if r else None) for c, r in seen.adoptable()) == [
        ("a", None),
        ("b", Outcome.APPLIED),
    ]
    assert [w.target.name for w in seen.writes()] == ["b"]


def test_an_applied_result_seen_before_its_command_is_kept_for_it() -> None:
    seen = SeenCommands(TTL)
    c = command("a")
    seen.result(result(c, Outcome.APPLIED), NOW)
    assert seen.command(c, NOW)
    assert [r.outcome if r else None for _, r in seen.adoptable()] == [Outcome.APPLIED]


def test_a_refusal_never_stops_an_adoption() -> None:
    """It may answer an earlier, identical command (same id): adopting costs time, not the limit."""
    seen = SeenCommands(TTL)
    c = command("a")
    seen.result(result(c, Outcome.PRECONDITION_FAILED), NOW)
    assert seen.command(c, NOW)
    seen.result(result(c, Outcome.EXPIRED), NOW)
    assert [(cmd.id, r) for cmd, r in seen.adoptable()] == [(c.id, None)]
    assert list(seen.writes()) == []


def test_dry_runs_and_writes_without_a_resource_version_are_not_writes() -> None:
    seen = SeenCommands(TTL)
    seen.result(result(command("dry"), Outcome.APPLIED, dry_run=True), NOW)
    seen.result(result(command("norv"), Outcome.APPLIED, rv=""), NOW)
    assert seen.applied(command("dry").id) is None
    assert list(seen.writes()) == []


def test_too_old_to_matter_is_not_kept() -> None:
    seen = SeenCommands(TTL)
    assert not seen.command(command("old", created_at=NOW - TTL - 1), NOW)
    seen.result(result(command("x"), Outcome.APPLIED, finished_at=NOW - TTL - 1), NOW)
    assert len(seen) == 0 and list(seen.writes()) == []


def test_everything_is_forgotten_after_the_ttl() -> None:
    seen = SeenCommands(TTL)
    c = command("a")
    seen.command(c, NOW)
    seen.result(result(c, Outcome.APPLIED), NOW)
    seen.prune(NOW + TTL - 1)
    assert len(seen) == 1
    seen.prune(NOW + TTL + 1)
    assert len(seen) == 0 and list(seen.writes()) == [] and seen.applied(c.id) is None


def test_no_created_at_or_a_clock_ahead_counts_from_when_it_was_seen() -> None:
    seen = SeenCommands(TTL)
    assert seen.command(command("zero", created_at=0.0), NOW)
    assert seen.command(command("ahead", created_at=NOW + 300), NOW)
    seen.prune(NOW + TTL - 1)
    assert len(seen) == 2


def test_writes_are_kept_as_long_as_a_view_may_lag_them() -> None:
    """`applied` results live for the decider's applied_ttl, commands only for its command_ttl."""
    seen = SeenCommands(TTL, applied_horizon=600.0)
    c = command("a")
    seen.command(c, NOW)
    seen.result(result(c, Outcome.APPLIED), NOW)
    seen.prune(NOW + TTL + 1)
    assert len(seen) == 0
    assert [w.target.name for w in seen.writes()] == ["a"]
    seen.prune(NOW + 601)
    assert list(seen.writes()) == []
