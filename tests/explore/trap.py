"""A state trap: an admission hook that sees the write putting the service into a state, freezes
the simulated Longhorn controllers at that instant (so the state holds while the fault goes in) and
records what the write was about. Fired inside the API server, as the v2 kill -9 scenarios' traps
are: a poll would arrive a pass or two late.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.fixtures.sandbox import Sandbox

Obj = dict[str, Any]
Match = Callable[[str, Obj | None, Obj | None], dict[str, str] | None]
"""(operation, old, new) → what the state is about (target names) when this write enters it."""


class Trap:
    def __init__(
        self, sandbox: Sandbox, group: str, plural: str, match: Match, *, freeze: bool = True
    ) -> None:
        self.fired = asyncio.Event()
        self.target: dict[str, str] = {}
        self._sandbox = sandbox
        self._match = match
        self._freeze = freeze
        self.hold_writes: list[str] = []
        """Resources whose writes the API server answers 429 from the instant the trap fires until
        the fault is in (`thaw`): a fault that must land atomically with the state, before any
        write the service decides on entering it (the actuator retries after Retry-After)."""
        self.description = f"a write to {plural} entering the state"
        sandbox.emulator.register_admission(
            group, plural, self._write, name="explore.trap", include_status=True
        )

    def _write(self, operation: str, old: Obj | None, new: Obj | None) -> None:
        if self.fired.is_set():
            return
        found = self._match(operation, old, new)
        if found is None:
            return
        self.target = found
        if self._freeze:
            self._sandbox.simulator.faults.stall()
        if self.hold_writes:
            self._sandbox.emulator.faults.update(
                {"throttle_rate": 1.0, "retry_after_s": 1, "plurals": list(self.hold_writes)}
            )
        self.fired.set()

    def thaw(self) -> None:
        if self.hold_writes:
            self._sandbox.emulator.faults.reset()
        if self._freeze:
            self._sandbox.simulator.faults.resume()
