"""What `corral progress <service>` draws, for any decision service that offers it: its targets
per group (owner node, instance manager's node…) as in flight, done, waiting or blocked with a
reason, read from the same events the service reads, with the service's own rules.

A service offers it through its definition (`DecisionService.progress`); the CLI knows only this
protocol and these figures, never a service's internals.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from corral_model.envelopes import ObjectEvent


class Phase(enum.StrEnum):
    IN_FLIGHT = "in-flight"
    DONE = "done"
    WAITING = "waiting"
    BLOCKED = "blocked"


@dataclass
class GroupFigures:
    """One group's row (or the total): counts per phase, blocked counts per reason."""

    node: str
    in_flight: int = 0
    done: int = 0
    waiting: int = 0
    blocked: Counter[str] = field(default_factory=Counter)

    @property
    def blocked_total(self) -> int:
        return sum(self.blocked.values())

    @property
    def volumes(self) -> int:
        return self.in_flight + self.done + self.waiting + self.blocked_total

    def add(self, phase: Phase, reason: str, delta: int) -> None:
        if phase is Phase.IN_FLIGHT:
            self.in_flight += delta
        elif phase is Phase.DONE:
            self.done += delta
        elif phase is Phase.WAITING:
            self.waiting += delta
        else:
            self.blocked[reason] += delta
            if not self.blocked[reason]:
                del self.blocked[reason]

    def key(self) -> tuple[int, int, int, tuple[tuple[str, int], ...]]:
        """What a change is measured by (a line is printed when it moves)."""
        return (self.in_flight, self.done, self.waiting, tuple(sorted(self.blocked.items())))

    def copy(self) -> GroupFigures:
        return GroupFigures(self.node, self.in_flight, self.done, self.waiting, Counter(self.blocked))

    @classmethod
    def sum(cls, rows: Iterable[GroupFigures], name: str = "total") -> GroupFigures:
        """The rows added up: a progress model's `total()`."""
        total = cls(name)
        for row in rows:
            total.in_flight += row.in_flight
            total.done += row.done
            total.waiting += row.waiting
            total.blocked.update(row.blocked)
        return total


class Progress(Protocol):
    """Events in, figures per group out."""

    @property
    def complete(self) -> bool:
        """Every kind read was listed: the figures are the cluster's."""

    @property
    def limit(self) -> int:
        """Targets allowed in flight per group (0: none)."""

    @property
    def target(self) -> str:
        """What the wave moves to (an image, a setting value…); empty when there is none."""

    def heading(self) -> str: ...

    def apply(self, event: ObjectEvent[Any]) -> None:
        """Fold one event in; raises `corral_decision.InvalidEvent` for one it cannot read."""

    def groups(self) -> list[GroupFigures]: ...

    def total(self) -> GroupFigures: ...

    def finished(self, target: str = "") -> bool:
        """Nothing in flight or waiting, nothing held by a passing reason (and `target` reached)."""


def details_of(model: Progress) -> list[str]:
    """One line per target worth naming (an instance manager waiting, and why; what blocks a
    setting, the components left on its old value), for a model that offers `details()` beside its
    per-group figures; none otherwise."""
    details = getattr(model, "details", None)
    return list(details()) if callable(details) else []
