"""Where the CPU goes, in the report itself: the functions a profiled pass spent its time in.

Issue 28 asks for profiles in the reports, not guesses. A profiler slows what it watches, so a bench
profiles a pass of its own beside the measured one (never the measured one) and reports each
function's share of that pass's time: shares survive the profiler's overhead well enough to say
where to look, while its absolute times do not.
"""

from __future__ import annotations

import cProfile
import pstats
from pathlib import Path
from typing import Any

TOP = 15
"""Functions kept per profile: beyond these, each is a percent or less of the time."""

_ROOT = str(Path(__file__).resolve().parent.parent) + "/"


def where(file: str, line: int, name: str) -> str:
    """`module/file.py:line(name)`, the path cut at the project or at site-packages; a built-in
    by its name alone."""
    if file == "~":
        return name
    if file.startswith(_ROOT):
        file = file[len(_ROOT) :]
    elif "site-packages/" in file:
        file = file.split("site-packages/", 1)[1]
    return f"{file}:{line}({name})"


def top(profile: cProfile.Profile | str, n: int = TOP) -> list[dict[str, Any]]:
    """The `n` functions with the most time of their own, each with its calls and its own and
    cumulative share of the whole profiled time (percent). `profile`: a profiler, or the file one
    dumped its stats to."""
    stats = pstats.Stats(profile)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(own for _, _, own, _, _ in entries.values()) or 1.0
    ranked = sorted(entries.items(), key=lambda item: item[1][2], reverse=True)[:n]
    return [
        {
            "function": where(*key),
            "calls": calls,
            "own_pct": round(own / total * 100, 1),
            "cumulative_pct": round(cumulative / total * 100, 1),
        }
        for key, (_, calls, own, cumulative, _) in ranked
    ]
