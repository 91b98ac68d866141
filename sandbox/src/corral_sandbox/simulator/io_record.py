"""What the SIM-IO ledger (io_ledger.py) keeps per volume: whether it is attached and serving, its
detaches, and its gaps. Apart from the ledger's rules so the simulator's memory (context.py) can
hold the records without importing the controller that fills them."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Gap:
    start: float
    end: float | None = None
    reasons: list[str] = field(default_factory=list)

    def seconds(self, now: float) -> float:
        return (now if self.end is None else self.end) - self.start


@dataclass
class VolumeIO:
    attached: bool = False
    serving: bool = False
    detaches: int = 0
    crash_detaches: int = 0
    gaps: list[Gap] = field(default_factory=list)

    def open_gap(self) -> Gap | None:
        return self.gaps[-1] if self.gaps and self.gaps[-1].end is None else None
