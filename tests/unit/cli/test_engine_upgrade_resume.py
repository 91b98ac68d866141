"""`corral engine-upgrade resume` reads the wave guard's pause off the default EngineImage and
resumes exactly that pause (an older resume, or none, leaves it paused)."""

from __future__ import annotations

from corral_cli.commands.engine_upgrade import pause_of, resume_patch
from corral_cli.main import build_parser
from corral_engine_upgrade.records import WAVE_PAUSED, WAVE_RESUMED


def test_the_pause_nobody_resumed_is_found_by_its_id() -> None:
    paused = {"metadata": {"annotations": {WAVE_PAUSED: "1700: 3 of 9 volumes failed"}}}
    assert pause_of(paused) == ("1700", "1700: 3 of 9 volumes failed")
    older = {"metadata": {"annotations": {WAVE_PAUSED: "1800: again", WAVE_RESUMED: "1700"}}}
    assert pause_of(older) == ("1800", "1800: again")
    resumed = {"metadata": {"annotations": {WAVE_PAUSED: "1800: again", WAVE_RESUMED: "1800"}}}
    assert pause_of(resumed) == ("", "")
    assert pause_of({"metadata": {}}) == ("", "")
    assert resume_patch("1800") == {"metadata": {"annotations": {WAVE_RESUMED: "1800"}}}


def test_resume_is_a_sub_command() -> None:
    args = build_parser().parse_args(["engine-upgrade", "resume", "--dry-run", "--namespace", "lh"])
    assert args.engine_upgrade_action == "resume" and args.dry_run and args.namespace == "lh"
