"""What the explorer reports: one cell per (service, state, fault) and its verdict.

A verdict is one of three: the cell passed, failed (with what broke), or the sandbox cannot
express it (with what the sandbox lacks). A cell that cannot be expressed is never counted as
passing, and never dropped silently.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Outcome(enum.StrEnum):
    PASS = "pass"
    FAIL = "fail"
    NOT_EXPRESSIBLE = "not expressible"


@dataclass(frozen=True, order=True)
class Cell:
    service: str
    state: str
    fault: str

    @property
    def id(self) -> str:
        return f"{self.service}/{self.state}/{self.fault}"


@dataclass
class Verdict:
    cell: Cell
    outcome: Outcome
    detail: str = ""
    recover_s: float | None = None
    """Seconds from the fault's clearing to the service finishing (None unless it finished)."""
    known: str = ""
    """For a failure: the issue-24 behaviour it shows, when it is one of the five known ones."""
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "service": self.cell.service,
            "state": self.cell.state,
            "fault": self.cell.fault,
            "outcome": str(self.outcome),
            "recover_s": None if self.recover_s is None else round(self.recover_s, 3),
            "elapsed_s": round(self.elapsed_s, 2),
        }
        if self.outcome is Outcome.NOT_EXPRESSIBLE:
            out["outcome"] = f"not expressible: {self.detail}"
        elif self.detail:
            out["detail"] = self.detail
        if self.known:
            out["known"] = self.known
        return out


class NotExpressible(Exception):
    """Raised by a fault the sandbox cannot inject in this world; the message says what it lacks."""
