"""What one pass of a state machine over one CR yields: the CR's status fields to change (one
guarded status patch), the writes to other objects it needs, and when it next has timed work."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from corral_model.envelopes import Command


@dataclass
class Step:
    status: dict[str, Any] = field(default_factory=dict)
    """camelCase status field → new value; empty: the CR's status stays as it is."""
    actions: list[Command] = field(default_factory=list)
    wake: float | None = None
    """When this CR next needs a look although nothing changed (a timeout, a start time)."""
    blocker: str = ""
    """What it waits for, when it waits (also written as the CR's message)."""

    def wait(self, why: str, current_message: str) -> Step:
        self.blocker = why
        if why != current_message:
            self.status["message"] = why
        return self


def parse_time(stamp: str | None) -> float | None:
    """An RFC 3339 time as epoch seconds; None when absent or unreadable."""
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
