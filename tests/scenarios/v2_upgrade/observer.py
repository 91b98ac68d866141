"""Feeds the scenario invariants (invariants.py) from inside the API server, at every write.

Validating admission hooks that never refuse anything (the im-restart scenarios' pattern) see each
write's old and new object on the two upgrade CRs, volumes, replicas, instance managers and pods,
status writes included; registered after the sandbox's own webhooks, they run only for writes
those let through. A poll could miss a volume detached and re-attached between two looks, or two
node upgrades in flight for one write; the server cannot.

`holds()` is the `invariant=` of `Sandbox.wait_for`: it raises at the first observation after a
violation, naming the write that broke the rule, and also checks the SIM-IO ledger (the longest
interval each volume could not serve) against the switch-over budget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any

from corral_model.kinds import CORRAL_GROUP, LONGHORN_GROUP
from tests.fixtures.sandbox import Sandbox
from tests.scenarios.v2_upgrade.invariants import (
    MANAGERS,
    NODE_UPGRADES,
    TERMINAL,
    UpgradeInvariants,
    Write,
    io_gap_violations,
)

WATCHED = (
    (CORRAL_GROUP, MANAGERS),
    (CORRAL_GROUP, NODE_UPGRADES),
    (LONGHORN_GROUP, "volumes"),
    (LONGHORN_GROUP, "replicas"),
    (LONGHORN_GROUP, "instancemanagers"),
    ("", "pods"),
    # not judged, kept for the history scenarios assert on
    (LONGHORN_GROUP, "nodes"),
    (LONGHORN_GROUP, "engines"),
    (LONGHORN_GROUP, "snapshots"),
)

IoGaps = Callable[[], Awaitable[Mapping[str, Iterable[float]]]]
"""Reads the SIM-IO ledger: volume → the length (s) of every interval it could not serve."""


class UpgradeObserver:
    def __init__(self, sandbox: Sandbox, io_gaps: IoGaps | None = None, io_budget: float = 0.0) -> None:
        self.sandbox = sandbox
        emulator = sandbox.emulator
        namespace = sandbox.namespace
        existing = {
            plural: emulator.list(group, plural, namespace)
            for group, plural in WATCHED
            if plural in (MANAGERS, NODE_UPGRADES, "instancemanagers")
        }
        self.checker = UpgradeInvariants(existing)
        self.io_gaps = io_gaps
        self.io_budget = io_budget
        self.writes: list[Write] = []
        """Every write judged, in order (a failing scenario prints the tail)."""
        for group, plural in WATCHED:
            emulator.register_admission(
                group, plural, self._hook(plural), name="observer.v2-upgrade", include_status=True
            )

    def _hook(self, plural: str) -> Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]:
        def judge(operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
            write = Write(plural, operation, old, new)
            self.writes.append(write)
            self.checker.observe(write)

        return judge

    @property
    def violations(self) -> list[str]:
        return self.checker.violations

    async def holds(self) -> None:
        """For `Sandbox.wait_for(invariant=…)`: raise at the first observation after a violation."""
        assert not self.violations, "\n".join(self.violations)
        if self.io_gaps is not None:
            late = io_gap_violations(await self.io_gaps(), self.io_budget)
            assert not late, "\n".join(late)

    # --- the history, for what a scenario asserts about the way (not only the end) ---------------------

    def mark(self) -> int:
        """Where the history stands now: pass it as `since=` to look only at later writes."""
        return len(self.writes)

    def versions(self, plural: str, name: str = "", since: int = 0) -> list[dict[str, Any]]:
        """Every version written of `plural` objects (named `name`, when given), in write order."""
        return [
            w.new
            for w in self.writes[since:]
            if w.plural == plural and w.new is not None and (not name or w.name == name)
        ]

    def states(self, plural: str, name: str) -> list[str]:
        """The `status.state` values the object passed through, each once per stay."""
        out: list[str] = []
        for version in self.versions(plural, name):
            state = str((version.get("status") or {}).get("state", ""))
            if not out or out[-1] != state:
                out.append(state)
        return out

    def values(self, plural: str, name: str, *path: str) -> list[Any]:
        """The values a field (`"spec", "targetNodeIDForLiveUpgrade"`, say) took, each once per stay."""
        out: list[Any] = []
        for version in self.versions(plural, name):
            value: Any = version
            for key in path:
                value = (value or {}).get(key)
            if not out or out[-1] != value:
                out.append(value)
        return out

    def deleted(self, plural: str, since: int = 0) -> list[dict[str, Any]]:
        """The objects of `plural` deleted, as they were just before, in order."""
        return [
            w.old
            for w in self.writes[since:]
            if w.plural == plural and w.operation == "DELETE" and w.old is not None
        ]

    def in_flight(self) -> Iterator[tuple[Write, str]]:
        """Each write with the node whose upgrade was unfinished just before it ("" for none)."""
        states: dict[str, tuple[str, str]] = {}
        for write in self.writes:
            busy = [node for node, state in states.values() if state not in TERMINAL]
            yield write, busy[0] if busy else ""
            if write.plural == NODE_UPGRADES:
                if write.new is None:
                    states.pop(write.name, None)
                else:
                    node = str(write.new["spec"].get("nodeID", ""))
                    states[write.name] = (node, str((write.new.get("status") or {}).get("state", "")))

    def created(self, plural: str, since: int = 0) -> list[dict[str, Any]]:
        return [
            w.new
            for w in self.writes[since:]
            if w.plural == plural and w.operation == "CREATE" and w.new is not None
        ]
