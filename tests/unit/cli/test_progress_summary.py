"""The last line of `corral progress`: each service's wave summed up in its own words (instance
managers for im-restart, settings for setting-sync, volumes for engine-upgrade), never another's."""

from __future__ import annotations

from collections import Counter

from corral_cli.progress.follow import WaveReport, summary
from corral_decision.progress import GroupFigures


def _report(service: str, *, finished: bool = True) -> WaveReport:
    total = GroupFigures("total", in_flight=1, done=2, waiting=3, blocked=Counter({"busy": 2}))
    return WaveReport(
        finished=finished,
        elapsed=1.25,
        total=total,
        limit=1,
        default_image="img:v2",
        max_in_flight={"node-1": 1},
        service=service,
    )


def test_im_restart_counts_instance_managers() -> None:
    line = summary(_report("im-restart"))
    assert line == (
        "im-restart done in 1.2s: 2 instance managers synced, 1 restarting, 3 due, blocked 2 (busy 2)"
    )


def test_setting_sync_speaks_of_settings() -> None:
    assert summary(_report("setting-sync")) == "setting-sync: every danger-zone setting applied after 1.2s"
    stopped = summary(_report("setting-sync", finished=False))
    assert stopped == "setting-sync: stopped after 1.2s, 3 components on an old value"


def test_engine_upgrade_counts_volumes() -> None:
    line = summary(_report("engine-upgrade"))
    assert line.startswith("engine-upgrade wave done in 1.2s: 2 volumes on img:v2")
