"""`corral replay engine-upgrade BUNDLE` on the recorded wave (tests/data/replay/): what it prints,
its exit status, and that the output is a function of the bundle alone, byte for byte, across
processes (whose string hashing differs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from corral_cli.main import main
from corral_decision.bundle import format_time, parse_time
from corral_model.version import corral_version
from tests.unit.decision.test_replay_bundle import WAVE, live_command_ids, wave_lines

CORRAL = str(Path(sys.executable).with_name("corral"))
DEGRADED = "Volume/longhorn-system/vol-d"


def corral(capsys: Any, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["replay", "engine-upgrade", *argv])
    return status, capsys.readouterr().out


def test_a_matching_replay_exits_0_and_lists_its_commands(capsys: Any) -> None:
    status, out = corral(capsys, str(WAVE))
    assert status == 0, out
    lines = out.splitlines()
    assert lines[0] == (
        "replay engine-upgrade: 394 lines, 318 object events, 7 results, 7 commands recorded; 7 replayed"
    )
    commands = [line for line in lines if line.startswith("command ")]
    assert {line.split()[1] for line in commands} == live_command_ids(wave_lines())
    assert all(" after line " in line for line in commands)
    assert sum(line.startswith("same ") for line in lines) == 7
    (first,) = [line for line in lines if line.startswith("same Volume/longhorn-system/vol-a1 ")]
    setting = "lh.obj.setting.longhorn-system.default-engine-image"
    assert first.endswith(
        f"replayed after line 207 {setting} seq 175, recorded at line 209"
        f" lh.cmd.engine-upgrade.volume.longhorn-system.vol-a1 after line 208 {setting} seq 176 [applied]"
    )
    assert lines[-1] == "diff: 7 same, 0 changed, 0 missing, 0 extra: the replay matches the recording"


def test_an_edited_recording_exits_1_naming_the_one_difference(capsys: Any, tmp_path: Path) -> None:
    edited_id = sorted(live_command_ids(wave_lines()))[0]
    bundle = tmp_path / "edited.jsonl"
    bundle.write_bytes(WAVE.read_bytes().replace(edited_id.encode(), b"engine-upgrade-" + b"f" * 32))
    status, out = corral(capsys, str(bundle))
    assert status == 1, out
    (changed,) = [line for line in out.splitlines() if line.startswith("changed ")]
    assert (
        f"replayed {edited_id} after line " in changed
        and f"recorded engine-upgrade-{'f' * 32} at line " in changed
    )
    assert out.splitlines()[-1].startswith("diff: 6 same, 1 changed, 0 missing, 0 extra")


def test_explain_gives_the_verdict_after_each_line_that_touched_the_target(capsys: Any) -> None:
    status, out = corral(capsys, str(WAVE), "--explain", DEGRADED)
    assert status == 0
    explained = out.split(f"explain {DEGRADED}\n", 1)[1].splitlines()
    touched = [line for line in explained if " *: " in line]
    assert touched and all(" lh.obj.volume.longhorn-system.vol-d " in line for line in touched)
    assert (
        explained[-1]
        == "  line 207 lh.obj.setting.longhorn-system.default-engine-image seq 175: degraded group node-2"
    )


def test_corrupt_lines_exit_2_and_name_their_numbers(capsys: Any, tmp_path: Path) -> None:
    lines = wave_lines()
    lines.insert(3, b"{oops\n")
    lines.append(lines[-1][:30])
    bundle = tmp_path / "corrupt.jsonl"
    bundle.write_bytes(b"".join(lines))
    status, out = corral(capsys, str(bundle))
    assert status == 2, out
    assert "unreadable line 4: " in out and f"unreadable line {len(lines)}: truncated" in out
    assert "diff: 7 same, 0 changed, 0 missing, 0 extra" in out  # the replay went on past both

    status, out = corral(capsys, str(bundle), "--strict")
    assert status == 2
    assert "stopped at the first unreadable line, 4 (--strict)" in out
    assert out.splitlines()[0].startswith("replay engine-upgrade: 3 lines,")
    assert f"unreadable line {len(lines)}" not in out


def test_bad_arguments_exit_2(capsys: Any, tmp_path: Path) -> None:
    assert corral(capsys, str(tmp_path / "absent.jsonl"))[0] == 2
    assert corral(capsys, str(WAVE), "--nats", "nats://127.0.0.1:1")[0] == 2
    assert corral(capsys, str(WAVE), "--from-seq", "5")[0] == 2


def test_two_runs_print_the_same_bytes(capsys: Any) -> None:
    assert corral(capsys, str(WAVE), "--explain", DEGRADED) == corral(
        capsys, str(WAVE), "--explain", DEGRADED
    )
    outputs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [CORRAL, "replay", "engine-upgrade", str(WAVE), "--explain", DEGRADED],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.add(done.stdout)
    assert len(outputs) == 1
    (printed,) = outputs
    assert printed.decode() == corral(capsys, str(WAVE), "--explain", DEGRADED)[1]


def test_the_namespace_picks_the_objects_the_decider_reads(capsys: Any) -> None:
    status, out = corral(capsys, str(WAVE), "--namespace", "elsewhere")
    assert status == 1
    assert out.splitlines()[0].startswith("replay engine-upgrade: 394 lines, 0 object events, 7 results")
    assert out.splitlines()[-1].startswith("diff: 0 same, 0 changed, 7 missing, 0 extra")


def _time_of(lines: list[bytes], number: int) -> str:
    return str(json.loads(lines[number - 1])["time"])


def test_since_compares_only_the_window_on_the_view_built_before_it(capsys: Any) -> None:
    """From the line the first command was recorded at, every command is still compared (the view
    at that moment is the whole bundle's up to it); from the end, none is, and the replay says so."""
    lines = wave_lines()
    status, out = corral(capsys, str(WAVE), "--since", _time_of(lines, 177))
    assert status == 0, out
    assert "diff: 7 same, 0 changed, 0 missing, 0 extra" in out, out
    status, out = corral(
        capsys, str(WAVE), "--since", format_time(parse_time(_time_of(lines, len(lines))) + 1)
    )
    assert status == 0, out
    assert "before --since: 7 replayed decisions not compared" in out, out
    assert "diff: 0 same, 0 changed, 0 missing, 0 extra" in out, out


def test_a_recording_made_by_another_release_is_named(capsys: Any, tmp_path: Path) -> None:
    bundle = tmp_path / "older.jsonl"
    edited = []
    for raw in wave_lines():
        document = json.loads(raw)
        if document["subject"].startswith(("lh.cmd.", "lh.res.")):
            document["headers"]["Corral-Version"] = "0.0.9"
        edited.append(json.dumps(document).encode() + b"\n")
    bundle.write_bytes(b"".join(edited))
    status, out = corral(capsys, str(bundle))
    assert status == 0, out
    (line,) = [line for line in out.splitlines() if line.startswith("version: ")]
    assert line.startswith(
        f"version: recorded by corral 0.0.9 (14 commands and results); this is corral {corral_version()}"
    )
