"""`corral engine-upgrade resume` reads the wave guard's pause off the default EngineImage and
resumes exactly that pause (an older resume, or none, leaves it paused); `corral engine-upgrade
rollback` approves rolling a stuck volume back."""

from __future__ import annotations

from corral_cli.commands.engine_upgrade import approve_patch, pause_of, resume_patch, stuck_images
from corral_cli.main import build_parser
from corral_engine_upgrade.records import ROLLBACK_APPROVED, WAVE_PAUSED, WAVE_RESUMED


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


def test_a_rollback_is_approved_for_the_image_a_volume_is_stuck_on() -> None:
    """`corral engine-upgrade rollback` names the image the upgrade under way moves to, on the version
    read; a volume with no upgrade under way has nothing to roll back."""
    stuck = {"spec": {"image": "engine:new"}, "status": {"currentImage": "engine:old"}}
    assert stuck_images(stuck) == ("engine:new", "engine:old")
    done = {"spec": {"image": "engine:old"}, "status": {"currentImage": "engine:old"}}
    assert stuck_images(done) == ("", "")
    assert stuck_images({"spec": {"image": "engine:new"}, "status": {}}) == ("", "")
    assert approve_patch("engine:new", "42") == {
        "metadata": {"resourceVersion": "42", "annotations": {ROLLBACK_APPROVED: "engine:new"}}
    }


def test_rollback_is_a_sub_command_next_to_resume() -> None:
    args = build_parser().parse_args(["engine-upgrade", "rollback", "vol-1", "--namespace", "lh"])
    assert args.engine_upgrade_action == "rollback" and args.volume == "vol-1" and args.namespace == "lh"
    assert not args.dry_run
