"""The text `corral replay` prints: one line per fact, no wall-clock time, in a fixed order, so the
same bundle prints the same bytes and two replays can be compared with `diff`.

    replay engine-upgrade: 812 lines, 640 object events, 29 results, 0 commands recorded; 29 replayed
    unreadable line 17: truncated (…)
    command <id> Volume/ns/vol-1 patch /spec/image=<new> if /spec/image=<old>, … after line 120 <subject>
    same Volume/ns/vol-1 <id> replayed after line 120 … recorded at line 131 … [applied]
    changed Volume/ns/vol-2 replayed <id> after line … recorded <id> at line … [applied]
    diff: 28 same, 1 changed, 0 missing, 0 extra: differs
    explain Volume/ns/vol-3
      line 40 lh.obj.volume.ns.vol-3 seq 12 *: degraded group node-1
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

from corral_cli.events.summary import describe
from corral_decision.bundle import Line
from corral_decision.command_diff import Difference, Match, ReplayedCommand
from corral_decision.recording import RecordedCommand
from corral_decision.replay import ReplayReport, Verdict


def _fields(values: Any) -> str:
    return ", ".join(f"{v.path}={v.value}" for v in values)


def _after(line: Line | None, timer: bool = False) -> str:
    where = f"after {line.where}" if line is not None else "at the start"
    return f"{where} (timer)" if timer else where


def command_line(made: ReplayedCommand) -> str:
    command = made.command
    text = f"command {command.id} {made.key} {command.verb} {_fields(command.changes)}"
    if command.preconditions:
        text += f" if {_fields(command.preconditions)}"
    return f"{text} {_after(made.after, made.timer)}"


def _recorded(recorded: RecordedCommand) -> str:
    outcomes = f" [{', '.join(recorded.outcomes)}]" if recorded.outcomes else ""
    after = f" after {recorded.after.where}" if recorded.command is not None and recorded.after else ""
    return f"at {recorded.first.where}{after}{outcomes}"


def difference_line(difference: Difference) -> str:
    made, seen = difference.replayed, difference.recorded
    if difference.match is Match.SAME:
        assert made is not None
        replayed = _after(made.after, made.timer)
        recorded = _recorded(seen) if seen is not None else "after --until"
        return f"same {difference.key} {made.command.id} replayed {replayed}, recorded {recorded}"
    if difference.match is Match.CHANGED:
        assert made is not None and seen is not None
        return (
            f"changed {difference.key} replayed {made.command.id} {_after(made.after, made.timer)},"
            f" recorded {seen.id} {_recorded(seen)}"
        )
    if difference.match is Match.MISSING:
        assert seen is not None
        return f"missing {difference.key} {seen.id} recorded {_recorded(seen)}, never replayed"
    assert made is not None
    return (
        f"extra {difference.key} {made.command.id} replayed {_after(made.after, made.timer)}, never recorded"
    )


def verdict_line(verdict: Verdict) -> str:
    where = verdict.after.where if verdict.after is not None else "start"
    if verdict.commands:
        where = f"decided after {where}"  # the replay's own decision on the target
    elif verdict.touched and verdict.after is not None:
        where += f" [{describe(verdict.after.entry)}]"  # what the line said about the target
    mark = " *" if verdict.touched and not verdict.commands else ""
    explanation = verdict.explanation
    if explanation is None:
        text = "not in the view"
    else:
        text = explanation.reason
        if explanation.detail:
            text += f" ({explanation.detail})"
        if explanation.group:
            text += f" group {explanation.group}"
    if verdict.commands:
        text += f"; commanded {', '.join(verdict.commands)}"
    return f"  {where}{mark}: {text}"


def report_lines(report: ReplayReport, *, explain: str | None) -> Iterator[str]:
    yield (
        f"replay {report.service}: {report.lines} lines, {report.objects} object events,"
        f" {report.results} results, {report.recorded_commands} commands recorded;"
        f" {len(report.replayed)} replayed"
    )
    if report.recorded_passes:
        yield f"passes: decided at the {report.recorded_passes} live passes the commands name, on their input"
    for limit in report.limits:
        yield f"limit: {limit}"
    others = {v: n for v, n in sorted(report.recorded_versions.items()) if v != report.running_version}
    if others:
        makers = ", ".join(f"corral {v} ({n} commands and results)" for v, n in others.items())
        yield (
            f"version: recorded by {makers}; this is corral {report.running_version}: where the rules"
            " changed in between, the replay decides as this release would"
        )
    if report.before_window:
        yield f"before --since: {report.before_window} replayed decisions not compared"
    for bad in report.bad_lines:
        yield f"unreadable line {bad.number}: {bad.reason}"
    if report.stopped_at is not None:
        yield f"stopped at the first unreadable line, {report.stopped_at.number} (--strict)"
    if report.cut_short:
        first = ", ".join(line.where for line in report.cut_short[:3])
        yield (
            f"history cut: {len(report.cut_short)} objects begin mid-history in this bundle ({first}"
            f"{', …' if len(report.cut_short) > 3 else ''}); LH_OBJECTS keeps only the last events of each"
            " object: replay from the bus's history instead (`corral replay SERVICE --nats URL --since T`)"
        )
    for line, reason in report.skipped:
        yield f"skipped {line.where}: {reason}"
    for made in report.replayed:
        yield command_line(made)
    for difference in report.differences:
        yield difference_line(difference)
    counts = Counter(d.match for d in report.differences)
    verdict = "matches the recording" if report.matches else "differs from the recording"
    yield (
        f"diff: {counts[Match.SAME]} same, {counts[Match.CHANGED]} changed, {counts[Match.MISSING]} missing,"
        f" {counts[Match.EXTRA]} extra: the replay {verdict}"
    )
    if explain is not None:
        yield f"explain {explain}"
        if not report.verdicts:
            yield "  no line touched it"
        for verdict_ in report.verdicts:
            yield verdict_line(verdict_)
