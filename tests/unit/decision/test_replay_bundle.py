"""The replay engine on a recorded engine-upgrade wave (tests/data/replay/engine-upgrade-wave.jsonl,
recorded by tests/integration/cli/test_replay_wave.py with `corral events dump --follow`): no NATS,
the service's own decider on the recording's clock.

The wave: seven volumes on v1.10.0 (three attached on node-1, two on node-2, two detached) and
vol-d attached on node-2 and degraded; the limit is 1 per owner node; v1.11.0 is created, deployed
and made the default, and the live service upgraded the seven, one per owner node at a time.
"""

from __future__ import annotations

import random
from pathlib import Path

from corral_decision import decision_service
from corral_decision.bundle import BadLine, Line, parse_time, read_bundle
from corral_decision.command_diff import Match
from corral_decision.replay import Replay, ReplayReport
from corral_model import codec
from corral_model.envelopes import CommandResult

WAVE = Path(__file__).resolve().parents[2] / "data" / "replay" / "engine-upgrade-wave.jsonl"
DEGRADED = "Volume/longhorn-system/vol-d"
DEFAULT_IMAGE_LINE = "lh.obj.setting.longhorn-system.default-engine-image"


def wave_lines() -> list[bytes]:
    return WAVE.read_bytes().splitlines(keepends=True)


def replay(lines: list[bytes], **options: object) -> ReplayReport:
    return Replay(decision_service("engine-upgrade"), **options).feed_all(read_bundle(lines))  # type: ignore[arg-type]


def live_command_ids(lines: list[bytes]) -> set[str]:
    """What the live service commanded, read straight from the bundle's results (its Events aside)."""
    ids = set()
    for line in read_bundle(lines):
        assert isinstance(line, Line)
        if line.entry.stream == "LH_RESULTS":
            result = codec.decode(line.entry.data, CommandResult)
            if result.target.kind != "Event":  # the wave's reports, not its decisions
                ids.add(result.command_id)
    return ids


def test_the_recorded_wave_replays_to_the_live_commands() -> None:
    report = replay(wave_lines())
    live = live_command_ids(wave_lines())
    assert len(live) == 7
    assert {made.command.id for made in report.replayed} == live
    assert len(report.replayed) == 7  # each decision once
    assert [d.match for d in report.differences] == [Match.SAME] * 7
    assert report.matches and not report.bad_lines and not report.skipped and not report.cut_short
    first = {made.key: made for made in report.replayed}
    trigger = first["Volume/longhorn-system/vol-a1"].after
    assert trigger is not None and trigger.entry.subject == DEFAULT_IMAGE_LINE  # the new default started it


def test_one_edited_command_is_exactly_one_difference() -> None:
    live = sorted(live_command_ids(wave_lines()))
    edited_id = live[3]
    forged = "engine-upgrade-" + "0" * 32
    lines = [line.replace(edited_id.encode(), forged.encode()) for line in wave_lines()]
    report = replay(lines)
    (difference,) = [d for d in report.differences if d.match is not Match.SAME]
    assert difference.match is Match.CHANGED
    assert difference.replayed is not None and difference.replayed.command.id == edited_id
    assert difference.recorded is not None and difference.recorded.id == forged
    assert len(report.differences) == 7 and not report.matches


def test_a_recorded_command_moved_to_another_target_is_exactly_one_difference() -> None:
    lines = wave_lines()
    index = next(
        i for i, line in enumerate(lines) if b"lh.cmd.engine-upgrade.volume.longhorn-system.vol-c1" in line
    )
    lines[index] = lines[index].replace(b'"name":"vol-c1"', b'"name":"vol-zz"')
    report = replay(lines)
    (difference,) = [d for d in report.differences if d.match is not Match.SAME]
    assert difference.match is Match.CHANGED and difference.key == "Volume/longhorn-system/vol-c1"


def test_explain_names_the_rule_that_blocks_the_degraded_volume() -> None:
    report = replay(wave_lines(), explain=DEGRADED)
    verdicts = report.verdicts
    assert verdicts, "nothing touched vol-d"
    touched = [v for v in verdicts if v.touched]
    assert touched and all(v.after is not None and v.after.entry.subject.endswith(".vol-d") for v in touched)
    started = next(
        i for i, v in enumerate(verdicts) if v.after and v.after.entry.subject == DEFAULT_IMAGE_LINE
    )
    assert [v.explanation.reason if v.explanation else None for v in verdicts[started:]] == [
        "degraded"
    ] * len(verdicts[started:])
    assert verdicts[-1].explanation is not None and verdicts[-1].explanation.group == "node-2"
    assert not any(made.key == DEGRADED for made in report.replayed)


def test_corrupt_lines_are_reported_and_the_replay_goes_on() -> None:
    lines = wave_lines()
    lines.insert(100, b'{"stream":"LH_OBJECTS","seq":\n')
    lines.insert(200, b"garbage\n")
    lines.append(lines[10][:50])  # a truncated last line, as a killed dump leaves it
    report = replay(lines)
    assert [(b.number, b.reason.startswith("truncated")) for b in report.bad_lines] == [
        (101, False),
        (201, False),
        (len(lines), True),
    ]
    assert report.matches and len(report.replayed) == 7


def test_strict_stops_at_the_first_corrupt_line() -> None:
    lines = wave_lines()
    lines.insert(100, b"garbage\n")
    report = replay(lines, strict=True)
    assert report.stopped_at == BadLine(101, report.stopped_at.reason if report.stopped_at else "")
    assert report.bad_lines == [report.stopped_at]
    assert report.lines == 100 and not report.replayed  # the wave had not started by line 100


def test_until_cuts_the_replay_and_the_recording_at_the_same_moment() -> None:
    lines = wave_lines()
    first_result = next(
        line for line in lines if b"lh.res.engine-upgrade.volume.longhorn-system.vol-a1" in line
    )
    (result_line,) = read_bundle([first_result])
    assert isinstance(result_line, Line)
    until = result_line.time_ns  # the first three commands are out; no slot has freed yet
    report = replay(lines, until_ns=until)
    assert sorted(made.key for made in report.replayed) == [
        "Volume/longhorn-system/vol-a1",
        "Volume/longhorn-system/vol-b1",
        "Volume/longhorn-system/vol-c2",
    ]
    assert report.matches and [d.match for d in report.differences] == [Match.SAME] * 3
    assert all(parse_time(m.after.entry.time) <= until for m in report.replayed if m.after)


def test_the_same_bundle_gives_the_same_report() -> None:
    def facts(report: ReplayReport) -> list[tuple[str, int | None]]:
        return [(m.command.id, m.after.number if m.after else None) for m in report.replayed]

    assert facts(replay(wave_lines())) == facts(replay(wave_lines()))


def test_lines_are_replayed_in_bundle_order_whatever_order_the_file_has() -> None:
    """`dump --follow` writes lines as they arrive: a command seen on core NATS, or a result, can
    come before object events the streams stored earlier. The replay puts them in order."""
    shuffled = wave_lines()
    random.Random(7).shuffle(shuffled)
    report = replay(shuffled)
    assert report.matches and {m.command.id for m in report.replayed} == live_command_ids(wave_lines())
