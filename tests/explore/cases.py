"""A cell as a pytest case: run it, and fail the test with what the cell found. A cell the sandbox
cannot express is a failure of the test that asked for it (the sample picks expressible ones); the
matrix records those instead."""

from __future__ import annotations

from tests.explore.matrix import run_cell
from tests.explore.model import Cell, Outcome, Verdict
from tests.fixtures.nats import NatsServer


async def explored(cell: Cell, nats: NatsServer) -> Verdict:
    verdict = await run_cell(cell, nats)
    assert verdict.outcome is not Outcome.FAIL, f"{cell.id}: {verdict.detail}"
    return verdict
