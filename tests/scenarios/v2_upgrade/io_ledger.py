"""The SIM-IO side of the invariants: how long each volume could not serve, read from the
simulator's per-volume I/O ledger (`corral_sandbox.simulator.io_ledger`), against the switch-over
budget the simulator documents.

"Stays attached and serving" is measured, not assumed: the simulator records every interval in
which a volume could not serve (its initiator suspended during a switch-over, its engine down, its
target's IM gone, a detach). The budget is `SimConfig.switchover_io_gap_budget`: suspend + switch +
resume, plus the rounds between those steps; a gap that long means a volume was left without a
target, not switched. Gaps are in the simulator's clock's seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from corral_sandbox.simulator.io_ledger import io_report
from tests.fixtures.sandbox import Sandbox
from tests.scenarios.v2_upgrade.observer import IoGaps


def io_budget(sandbox: Sandbox) -> float:
    return float(sandbox.simulator.config.switchover_io_gap_budget)


def ledger(sandbox: Sandbox) -> dict[str, Any]:
    """Per volume: attached, serving, detaches, every gap (start, end, seconds, reasons)."""
    simulator = sandbox.simulator
    report: dict[str, Any] = io_report(simulator.memory, simulator.clock.now())["volumes"]
    return report


def io_gaps(sandbox: Sandbox) -> IoGaps:
    """The ledger reader for `UpgradeObserver`: volume → the length of every gap it had."""

    async def read() -> Mapping[str, Iterable[float]]:
        return {name: [float(g["seconds"]) for g in entry["gaps"]] for name, entry in ledger(sandbox).items()}

    return read
