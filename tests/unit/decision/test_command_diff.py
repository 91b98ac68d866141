"""Replayed against recorded commands, by id: same, missing, extra, and a pair on one target as one
change."""

from __future__ import annotations

from corral_decision.bundle import Line, entry
from corral_decision.command_diff import Match, ReplayedCommand, compare
from corral_decision.recording import Recording
from corral_model.envelopes import (
    Command,
    CommandResult,
    FieldValue,
    Outcome,
    Target,
    Verb,
    new_command,
)

T0 = 1_795_588_228_000_000_000


def line(number: int) -> Line:
    return Line(
        number, entry("LH_RESULTS", number, T0 + number, f"lh.res.s.volume.ns.v{number}", {}, b"{}"), T0
    )


def command(name: str, image: str = "old") -> Command:
    return new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace="ns", name=name),
        changes=(FieldValue(path="/spec/image", value="new"),),
        preconditions=(FieldValue(path="/spec/image", value=image),),
        created_at=float(len(name)),  # time is no part of the id
    )


def result(made: Command) -> CommandResult:
    return CommandResult(
        command_id=made.id, service=made.service, target=made.target, outcome=Outcome.APPLIED
    )


def test_ids_match_whether_recorded_whole_or_only_by_their_result() -> None:
    a, b = command("a"), command("b")
    recording = Recording()
    recording.command(line(1), a)
    recording.result(line(2), result(a))
    recording.result(line(3), result(b))
    replayed = [ReplayedCommand(a, None), ReplayedCommand(b, line(1)), ReplayedCommand(a, line(2))]
    differences = compare(replayed, recording.commands)
    assert [(d.match, d.key) for d in differences] == [
        (Match.SAME, "Volume/ns/a"),
        (Match.SAME, "Volume/ns/b"),
    ]
    assert recording.commands[a.id].outcomes == ["applied"] and recording.commands[a.id].first.number == 1


def test_missing_extra_and_one_change_per_target() -> None:
    recording = Recording()
    recording.result(line(1), result(command("gone")))
    recording.result(line(2), result(command("moved", image="older")))
    replayed = [ReplayedCommand(command("new"), line(3)), ReplayedCommand(command("moved"), line(4))]
    differences = compare(replayed, recording.commands)
    assert [(d.match, d.key) for d in differences] == [
        (Match.MISSING, "Volume/ns/gone"),
        (Match.CHANGED, "Volume/ns/moved"),
        (Match.EXTRA, "Volume/ns/new"),
    ]
    changed = differences[1]
    assert changed.replayed is not None and changed.recorded is not None
    assert changed.replayed.command.id != changed.recorded.id


def test_a_recorded_command_that_is_not_what_its_id_says_is_a_change() -> None:
    made = command("a")
    forged = Command(
        id=made.id,
        service=made.service,
        verb=made.verb,
        target=Target(kind="Volume", namespace="ns", name="elsewhere"),
        changes=made.changes,
        preconditions=made.preconditions,
    )
    recording = Recording()
    recording.command(line(1), forged)
    (difference,) = compare([ReplayedCommand(made, None)], recording.commands)
    assert difference.match is Match.CHANGED


def test_results_after_until_confirm_but_never_go_missing() -> None:
    a, b = command("a"), command("b")
    recording = Recording()
    differences = compare([ReplayedCommand(a, None)], recording.commands, confirm_only={a.id, b.id})
    assert [(d.match, d.recorded) for d in differences] == [(Match.SAME, None)]  # b: never `missing`
    assert [d.match for d in compare([ReplayedCommand(a, None)], recording.commands)] == [Match.EXTRA]
