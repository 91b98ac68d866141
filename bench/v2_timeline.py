"""When each v2 upgrade CR entered each state, as the API server took the write: the bench's clock.

An admission hook that never refuses anything sees every write to DataEngineUpgradeManagers and
NodeDataEngineUpgrades (status included) just before it is committed, and notes the time of each
state change. From that: the upgrade's wall time (the manager's creation to its `completed`), and
per node upgrade how long each step took, which the bench sets beside the step's lower bound, so
the time the services add shows per step (watch, debounce, the actuator's round trips) instead of
as one total.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from corral_sandbox.emulator import Emulator

CORRAL = "corral.longhorn.io"
Obj = dict[str, Any]


@dataclass(frozen=True)
class Transition:
    at: float
    plural: str
    name: str
    node: str
    state: str
    abort_reason: str = ""


@dataclass
class StateTimeline:
    clock: Callable[[], float] = time.monotonic
    transitions: list[Transition] = field(default_factory=list)
    on_node_start: Callable[[str], None] | None = None
    """Called with the node as each node upgrade is created (the bench reads the replica layout
    then: each node's load is what it holds when its turn comes, not what it held at the start)."""
    on_node_state: Callable[[str, str], None] | None = None
    """Called with the node and the state as each node upgrade's state changes, before the write
    is committed (so before anything else sees it)."""

    def attach(self, emulator: Emulator) -> StateTimeline:
        for plural in ("dataengineupgrademanagers", "nodedataengineupgrades"):
            emulator.register_admission(
                CORRAL, plural, self._hook(plural), name=f"timeline.{plural}", include_status=True
            )
        return self

    def _hook(self, plural: str) -> Callable[[str, Obj | None, Obj | None], None]:
        def note(operation: str, old: Obj | None, new: Obj | None) -> None:
            self.observe(plural, old, new)

        return note

    def observe(self, plural: str, old: Obj | None, new: Obj | None) -> None:
        if new is None:
            return
        if old is None and plural == "nodedataengineupgrades" and self.on_node_start is not None:
            self.on_node_start(str((new.get("spec") or {}).get("nodeID") or ""))
        status = new.get("status") or {}
        state = str(status.get("state") or "")
        if old is not None and str((old.get("status") or {}).get("state") or "") == state:
            return
        node = str((new.get("spec") or {}).get("nodeID") or "")
        self.transitions.append(
            Transition(
                at=self.clock(),
                plural=plural,
                name=str(new["metadata"]["name"]),
                node=node,
                state=state,
                abort_reason=str(status.get("abortReason") or ""),
            )
        )
        if plural == "nodedataengineupgrades" and self.on_node_state is not None:
            self.on_node_state(node, state)

    def first(self, plural: str, state: str) -> float | None:
        return next((t.at for t in self.transitions if t.plural == plural and t.state == state), None)

    def wall_s(self) -> float | None:
        """The manager's creation to its `completed`."""
        start = self.first("dataengineupgrademanagers", "")
        end = self.first("dataengineupgrademanagers", "completed")
        return None if start is None or end is None else end - start

    def steps(self) -> dict[str, dict[str, float]]:
        """Per node upgrade (by node): seconds spent in each state it left, and `total` (creation
        to completed or error)."""
        per_upgrade: dict[str, list[Transition]] = {}
        for t in self.transitions:
            if t.plural == "nodedataengineupgrades":
                per_upgrade.setdefault(t.name, []).append(t)
        result: dict[str, dict[str, float]] = {}
        for seen in per_upgrade.values():
            spent: dict[str, float] = {}
            for before, after in itertools.pairwise(seen):
                key = before.state or "created"
                spent[key] = round(spent.get(key, 0.0) + after.at - before.at, 6)
            spent["total"] = round(seen[-1].at - seen[0].at, 6)
            result[seen[0].node] = spent
        return result
