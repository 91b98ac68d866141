"""Every bench in its quick mode (bench/report.py): it runs its whole path on sizes that take
seconds and writes its report, so no bench can rot unnoticed between the runs that measure.

Each runs as `make bench` runs it (`python -m bench.<name>`, its own process), with its report
written to the test's directory, never over a real run's figures. Nothing here is a speed: the
figures of a quick run mean nothing, only that they are there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import QUICK_ENV, RESULTS_ENV

pytestmark = [pytest.mark.integration, pytest.mark.real_nats]

ROOT = Path(__file__).resolve().parents[3]
BENCHES = sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))


def test_every_bench_is_here() -> None:
    assert len(BENCHES) >= 15, BENCHES


@pytest.mark.parametrize("bench", BENCHES)
def test_the_bench_completes_and_reports_in_quick_mode(bench: str, tmp_path: Path) -> None:
    env = {**os.environ, QUICK_ENV: "1", RESULTS_ENV: str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{bench}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    [report] = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    assert report["quick"] is True and report["commit"]
    assert report["figures"], report
    assert {"load_average_at_write", "calibration_empty_call_ns_at_write"} <= set(report["machine"])
