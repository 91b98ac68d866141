"""The SIM-IO side of the invariants: how long each volume could not serve, read from the
simulator's per-volume I/O ledger, against the switch-over budget.

"Stays attached and serving" is measured, not assumed: the simulator records every interval in
which a volume's frontend could not serve (a suspended target during a switch-over, an I/O error,
a detach). The budget is what one switch-over may cost, the simulator's own configured
suspend-to-resume time with room for a loaded machine; a gap as long as the budget means the
volume was left without a target, not switched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from tests.fixtures.sandbox import Sandbox
from tests.scenarios.v2_upgrade.observer import IoGaps

IO_BUDGET_S = 2.0
"""The longest a volume may go without serving during one switch-over (see module docstring)."""


def io_gaps(sandbox: Sandbox) -> IoGaps | None:
    """The ledger reader for `UpgradeObserver`, or None while the simulator keeps no ledger."""
    ledger = getattr(sandbox.simulator, "io_ledger", None)
    if ledger is None:
        return None

    async def read() -> Mapping[str, Iterable[float]]:
        return {str(volume): [float(g) for g in gaps] for volume, gaps in ledger.gaps().items()}

    return read
