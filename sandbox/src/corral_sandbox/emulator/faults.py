"""Faults switchable at run time, so tests can show a client survives what real clusters do.

Set them in-process (`emulator.faults.conflict_rate = 0.2`) or, from another process, with
`POST /_sandbox/faults` and a JSON object of the same field names. Draws come from one seeded random
generator so a run with the same seed and request order injects the same faults.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from corral_sandbox.emulator.errors import ApiError, conflict, internal_error, too_many_requests
from corral_sandbox.emulator.resources import ResourceType

_RATES = ("conflict_rate", "throttle_rate", "error_rate")
_SECONDS = ("latency_s", "write_latency_s")


def _checked(name: str, value: Any) -> Any:
    """Refuse a knob value of the wrong kind, so a typo over HTTP cannot break every request."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if name in _RATES and not (number and 0.0 <= value <= 1.0):
        raise ValueError(f"{name} must be a number between 0 and 1, got {value!r}")
    if name in _SECONDS and not (number and value >= 0):
        raise ValueError(f"{name} must be a number of seconds >= 0, got {value!r}")
    if (
        name in ("watch_cut_after_events", "watch_cut_after_s")
        and value is not None
        and not (number and value >= 0)
    ):
        raise ValueError(f"{name} must be null or a number >= 0, got {value!r}")
    if name in ("retry_after_s", "seed") and not (isinstance(value, int) and not isinstance(value, bool)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if name == "watch_drop_silently" and not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    if name == "plurals" and not (isinstance(value, list) and all(isinstance(p, str) for p in value)):
        raise ValueError(f"{name} must be a list of resource names, got {value!r}")
    return value


@dataclass
class Faults:
    latency_s: float = 0.0  # added before every API request is handled
    write_latency_s: float = 0.0  # added before every write (on top of latency_s)
    conflict_rate: float = 0.0  # share of writes answered 409 Conflict
    throttle_rate: float = 0.0  # share of writes answered 429 TooManyRequests (with Retry-After)
    retry_after_s: int = 1
    error_rate: float = 0.0  # share of writes answered 500 InternalError
    watch_cut_after_events: int | None = None  # end every watch after it has sent this many events
    watch_cut_after_s: float | None = None  # end every watch after this many seconds
    watch_drop_silently: bool = False  # instead of ending the watch, stop sending and keep it open
    plurals: list[str] = field(default_factory=list)  # only these resources get write faults (empty = all)
    seed: int = 0

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def update(self, changes: dict[str, Any]) -> None:
        """Apply a partial update (the HTTP control body); unknown names are refused."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ValueError(f"unknown fault settings: {', '.join(unknown)}")
        for key, value in changes.items():
            setattr(self, key, _checked(key, value))
        if "seed" in changes:
            self._random = random.Random(self.seed)

    def reset(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, f.default_factory() if callable(f.default_factory) else f.default)
        self._random = random.Random(self.seed)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def writes_faulty(self) -> bool:
        return bool(self.conflict_rate or self.throttle_rate or self.error_rate)

    def write_fault(self, rt: ResourceType, name: str, *, creating: bool = False) -> ApiError | None:
        """The injected refusal for this write, if the dice say so.

        One roll, split into consecutive bands of the rates that apply. A create is never a Conflict
        (the apiserver only answers that to writes against an existing object's resourceVersion), so
        for a create the conflict band is left out altogether rather than passed on to the next
        band: with `conflict_rate=1` and nothing else, creates succeed instead of being throttled.
        """
        if not self.writes_faulty or (self.plurals and rt.plural not in self.plurals):
            return None
        roll = self._random.random()
        if not creating:
            if roll < self.conflict_rate:
                return conflict(
                    rt,
                    name,
                    "the object has been modified; please apply your changes to the latest version and"
                    " try again",
                )
            roll -= self.conflict_rate
        if roll < self.throttle_rate:
            return too_many_requests(self.retry_after_s)
        roll -= self.throttle_rate
        if roll < self.error_rate:
            return internal_error("injected fault")
        return None
