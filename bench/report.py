"""Shared by every benchmark: machine facts and one JSON report per benchmark under bench/results/.

Benchmarks measure; they never assert. The report is what a reader compares against the floors the
issues set, so each figure is named exactly as the issue names it.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def write_report(name: str, figures: dict[str, Any], floors: dict[str, str] | None = None) -> Path:
    """Write bench/results/<name>.json with the figures, the floors they answer, and the machine."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": name,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "figures": figures,
        "floors": floors or {},
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    print(json.dumps(report["figures"], indent=2, sort_keys=True))
    return path
