"""Which input a decision was made on: the `Corral-Decided-On` header of every published command.

A live service decides when its input arrives, and arrival is stream time plus a delivery delay
that no recording holds: two events stored 3 ms apart may reach one pass together, or two passes.
A replay on stream time alone then decides on a view one event earlier or later than the live
service did, and a decision that raced that event (a delete refused because the pod was already
going) is not made again. So each command says what its pass had taken in: the stream sequence of
the last LH_OBJECTS event and the last LH_RESULTS result the runner had applied, and the decider's
clock. `corral replay` decides at exactly those points (replay.py) when the recording holds them.

Outside the command id: the same decision made on another view is still the same decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DECIDED_ON_HEADER = "Corral-Decided-On"


@dataclass(frozen=True, order=True)
class DecidedOn:
    """A pass's input position: everything up to these sequences applied, and nothing after."""

    objects_seq: int
    """The last LH_OBJECTS event applied (0: none)."""
    results_seq: int
    """The last LH_RESULTS result applied (0: none)."""
    at: float
    """The decider's clock at the pass (seconds since the epoch)."""

    def header(self) -> str:
        return f"{self.objects_seq} {self.results_seq} {self.at:.6f}"

    @classmethod
    def parse(cls, value: str) -> DecidedOn | None:
        """None for a value this release cannot read (a malformed or newer header)."""
        parts = value.split()
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            return None
        try:
            at = float(parts[2])
        except ValueError:
            return None
        if not math.isfinite(at):
            return None
        return cls(int(parts[0]), int(parts[1]), at)
