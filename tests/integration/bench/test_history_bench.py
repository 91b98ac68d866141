"""The history bench's quick mode (bench/bench_history.py --quick), so it cannot rot: a small wave,
its report written, and its figures consistent with one another (never a speed: the machine is
shared)."""

from __future__ import annotations

import json

import pytest

from bench.bench_history import QUICK, STATED_EVENTS_PER_VOLUME_PER_HOUR, main

pytestmark = [pytest.mark.integration, pytest.mark.real_nats]


def test_the_quick_history_bench_reports_the_cost_per_volume() -> None:
    main(["--quick"])
    from bench.report import RESULTS

    figures = json.loads((RESULTS / "history_quick.json").read_text())["figures"]
    assert figures["cluster"]["volumes"] == QUICK.volumes
    assert figures["cluster"]["upgraded_in_wave"] > 0
    assert set(figures["messages_by_origin"]) == {"objects", "commands", "results"}
    assert figures["wave_messages_per_volume"] > 0 and figures["wave_bytes_per_volume"] > 0
    steady = STATED_EVENTS_PER_VOLUME_PER_HOUR * 24 * figures["accounted_bytes_per_object_event"]
    # The report rounds each figure, the bytes per event to 0.1: 288 events a day carry that on.
    assert figures["bytes_per_volume_per_day"] == pytest.approx(
        steady + figures["wave_bytes_per_volume"], abs=20
    )
    assert figures["bytes_per_volume_per_retention"] == pytest.approx(
        7 * figures["bytes_per_volume_per_day"], abs=8
    )
