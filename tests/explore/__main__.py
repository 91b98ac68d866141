"""`python -m tests.explore [--workers N] [--merge] [cell ...]`: run the matrix (every cell, or
those named: a service, service/state, service/state/fault, or a pattern such as '*/*/api-409'),
N cells at a time (default 1), each worker on its own NATS server (a cell resets the streams, and
one restarts its server), and write
bench/results/explore.json: one record per (service, state, fault) with its outcome (pass, fail,
or "not expressible: <what the sandbox lacks>"), the time to recover, and for a failure what broke
and whether it is one of issue 24's five known behaviours. `--merge` keeps the other cells of the
explore.json already there (a re-run of some cells)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Iterable
from fnmatch import fnmatch
from typing import Any

from bench.report import RESULTS, write_report
from tests.explore.matrix import cells, run_cell
from tests.explore.model import Cell, Outcome, Verdict
from tests.fixtures.nats import BinaryNats, NatsServer

CELL_TIMEOUT_S = 240.0
"""A cell that hangs beyond this fails (the explorer never waits on one cell forever)."""


def selected(filters: Iterable[str]) -> list[Cell]:
    wanted = list(filters)
    return [
        c
        for c in cells()
        if not wanted or any(c.id == f or c.id.startswith(f"{f}/") or fnmatch(c.id, f) for f in wanted)
    ]


async def run_guarded(cell: Cell, nats: NatsServer) -> Verdict:
    try:
        return await asyncio.wait_for(run_cell(cell, nats), CELL_TIMEOUT_S)
    except TimeoutError:
        return Verdict(cell, Outcome.FAIL, f"the cell did not end within {CELL_TIMEOUT_S:.0f}s")
    except Exception as error:  # the explorer's own failure: recorded as a failure, never dropped
        return Verdict(cell, Outcome.FAIL, f"explorer error: {error!r}"[:800])


def figures(verdicts: list[Verdict]) -> dict[str, object]:
    return summary([v.as_dict() for v in verdicts])


def summary(records: list[dict[str, Any]]) -> dict[str, object]:
    """explore.json's figures: every cell's record, and the totals over them."""
    outcomes = Counter(str(r["outcome"]).split(":")[0] for r in records)
    recovered = [float(r["recover_s"]) for r in records if r.get("recover_s") is not None]
    return {
        "cells": records,
        "totals": {
            "cells": len(records),
            **{str(o): outcomes.get(str(o), 0) for o in Outcome},
            "known_failures": sum(1 for r in records if r["outcome"] == "fail" and r.get("known")),
            "other_failures": sum(1 for r in records if r["outcome"] == "fail" and not r.get("known")),
        },
        "recover_s_max": max(recovered, default=None),
    }


def merged(fresh: list[Verdict]) -> list[dict[str, Any]]:
    """explore.json's cells with `fresh` in place of their earlier records, in the matrix's order."""
    path = RESULTS / "explore.json"
    earlier = json.loads(path.read_text())["figures"]["cells"] if path.exists() else []
    records = {(r["service"], r["state"], r["fault"]): r for r in earlier}
    for verdict in fresh:
        records[(verdict.cell.service, verdict.cell.state, verdict.cell.fault)] = verdict.as_dict()
    order = {(c.service, c.state, c.fault): n for n, c in enumerate(cells())}
    return sorted(
        records.values(), key=lambda r: order.get((r["service"], r["state"], r["fault"]), len(order))
    )


async def worker(queue: asyncio.Queue[Cell], total: int, verdicts: dict[Cell, Verdict]) -> None:
    nats = BinaryNats()
    nats.start()
    try:
        while not queue.empty():
            cell = queue.get_nowait()
            verdict = await run_guarded(cell, nats)
            verdicts[cell] = verdict
            record = verdict.as_dict()
            line = f"[{len(verdicts)}/{total}] {cell.id}: {record['outcome']} {record.get('detail', '')}"
            print(line[:400], flush=True)
    finally:
        nats.stop()


async def main(arguments: list[str]) -> int:
    workers, merge = 1, False
    while arguments[:1] in (["--workers"], ["--merge"]):
        if arguments[0] == "--merge":
            merge, arguments = True, arguments[1:]
        else:
            workers, arguments = int(arguments[1]), arguments[2:]
    todo = selected(arguments)
    if not todo:
        print(f"no cell matches {arguments}", file=sys.stderr)
        return 2
    queue: asyncio.Queue[Cell] = asyncio.Queue()
    for cell in todo:
        queue.put_nowait(cell)
    found: dict[Cell, Verdict] = {}
    await asyncio.gather(*(worker(queue, len(todo), found) for _ in range(workers)))
    verdicts = [found[cell] for cell in todo]
    write_report(
        "explore",
        summary(merged(verdicts)) if merge else figures(verdicts),
        floors={"cells": "every cell passing or named as not expressible (issue 24, Must show)"},
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
