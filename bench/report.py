"""Shared by every benchmark: machine facts and one JSON report per benchmark under bench/results/.

The machine is shared, so every report says how busy it was when written: the load average and
`calibration_ns` (what an empty Python call costs then), beside whatever the bench recorded itself
before and after its run.

Benchmarks measure; they never assert. The report is what a reader compares against the floors the
issues set, so each figure is named exactly as the issue names it.

Quick mode (`CORRAL_BENCH_QUICK=1`, what `make test` runs through tests/integration/bench): every
bench runs its whole path on sizes that take seconds (`scaled`), and writes its report where
`CORRAL_BENCH_RESULTS` says (the test's temporary directory), never over a real run's figures.
Its figures mean nothing; that it completes and reports is what it shows, so no bench can rot
unnoticed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

QUICK_ENV = "CORRAL_BENCH_QUICK"
RESULTS_ENV = "CORRAL_BENCH_RESULTS"
RESULTS = Path(os.environ.get(RESULTS_ENV) or Path(__file__).resolve().parent / "results")


def quick() -> bool:
    """Whether this is a quick run (`make test`'s look that the bench still works)."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0")


def scaled(full: int, small: int) -> int:
    """`full` in a real run, `small` in a quick one."""
    return small if quick() else full


def commit() -> str:
    """The commit the figures were measured at ("" outside a git checkout)."""
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def calibration_ns() -> float:
    """ns per call of an empty Python function on this machine, now. The machine these figures
    come from may be shared and busy; dividing a figure by this gives it in "empty calls", which
    compares across machines (an idle modern x86 core does one in about 30-50 ns)."""

    def empty() -> None:
        return None

    wall = time.perf_counter()
    for _ in range(1_000_000):
        empty()
    return (time.perf_counter() - wall) / 1_000_000 * 1e9


def write_report(name: str, figures: dict[str, Any], floors: dict[str, str] | None = None) -> Path:
    """Write bench/results/<name>.json with the figures, the floors they answer, and the machine."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": name,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit(),
        "quick": quick(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "load_average_at_write": os.getloadavg(),
            "calibration_empty_call_ns_at_write": round(calibration_ns(), 1),
        },
        "figures": figures,
        "floors": floors or {},
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(json.dumps(report["figures"], indent=2, sort_keys=True))
    return path
