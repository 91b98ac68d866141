"""`corral progress v2-upgrade`: the upgrade as the operator follows it, one row per node.

Read from the same events the service reads (the kit's `Progress` protocol), with the service's
own view: per node, its volumes done, in flight (the node being upgraded), waiting (nodes still
pending) or blocked, by the blocker its node upgrade reports ("volume pvc-x has only 1 replica…")
or the reason a node ended in error. The heading names the manager, its state, the node in
flight, its step and its progress. Below the table (`details()`), the node in flight's volumes,
each with its state and its time in that state (`status.volumes[v].since`), and what the node
waits for.

Times in state are coarse (`<1m`, `4m`, `1h05m`): a line view prints a detail again whenever it
changes, so a per-second figure would repeat every line every second in a log.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from corral_decision.decider import InvalidEvent
from corral_decision.progress import GroupFigures, Phase
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent
from corral_v2_upgrade.commands import node_upgrade_name
from corral_v2_upgrade.core import READS
from corral_v2_upgrade.states import UpgradeState, is_terminal
from corral_v2_upgrade.step import parse_time
from corral_v2_upgrade.view import UpgradeView

S = UpgradeState


class ProgressModel:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.view = UpgradeView()
        self._unlisted = set(READS)

    @property
    def complete(self) -> bool:
        return not self._unlisted

    @property
    def limit(self) -> int:
        return 0  # one node at a time; its volumes all move together

    @property
    def target(self) -> str:
        manager = self._manager()
        return manager.status.instance_manager_image if manager is not None else ""

    def apply(self, event: ObjectEvent[Any]) -> None:
        struct = READS.get(event.kind)
        if struct is None:
            raise InvalidEvent(f"v2-upgrade does not read {event.kind!r}")
        if event.type is EventType.RESYNCED:
            self._unlisted.discard(event.kind)
            return
        if event.type is EventType.UNREADABLE:
            return
        if event.type is not EventType.DELETED and not isinstance(event.object, struct):
            raise InvalidEvent(f"{event.kind} {event.namespace}/{event.name} carries no {struct.__name__}")
        self.view.put(event.kind, event.name, None if event.type is EventType.DELETED else event.object)

    def _manager(self) -> lh.DataEngineUpgradeManager | None:
        """The manager followed: an unfinished one, else the most recent."""
        managers = sorted(
            self.view.managers.values(), key=lambda m: (m.metadata.creation_timestamp or "", m.metadata.name)
        )
        unfinished = [m for m in managers if not is_terminal(m.status.state)]
        chosen = unfinished or managers
        return chosen[0] if chosen else None

    def heading(self) -> str:
        manager = self._manager()
        if manager is None:
            return "v2-upgrade: no DataEngineUpgradeManager"
        status = manager.status
        line = f"v2-upgrade {manager.metadata.name}: {status.state or 'undefined'} {status.progress}".rstrip()
        node = status.upgrading_node
        if node:
            current = self._current(manager, node)
            step = str(current.status.state) if current is not None else ""
            since = current.status.state_since if current is not None else ""
            held = f" for {self._held(since)}" if parse_time(since) is not None else ""
            line += f"; upgrading {node} ({step or 'undefined'}{held})"
        if status.message:
            line += f"; {status.message}"
        return line

    def _current(self, manager: lh.DataEngineUpgradeManager, node: str) -> lh.NodeDataEngineUpgrade | None:
        entry = manager.status.upgrade_nodes.get(node, lh.UpgradeNodeStatus())
        return self.view.node_upgrades.get(node_upgrade_name(manager, node, entry.attempts))

    def groups(self) -> list[GroupFigures]:
        manager = self._manager()
        if manager is None:
            return []
        rows = []
        for node, entry in sorted(manager.status.upgrade_nodes.items()):
            row = GroupFigures(node)
            owned = len(self.view.v2_volumes_owned_by(node))
            if entry.state == S.COMPLETED:
                row.add(Phase.DONE, "", owned)
            elif entry.state == S.ERROR:
                row.add(Phase.BLOCKED, f"node failed: {entry.message}", max(owned, 1))
            elif entry.state == S.PENDING:
                row.add(Phase.WAITING, "", owned)
            else:
                self._in_flight(manager, node, row, owned)
            rows.append(row)
        return rows

    def _in_flight(
        self, manager: lh.DataEngineUpgradeManager, node: str, row: GroupFigures, owned: int
    ) -> None:
        current = self._current(manager, node)
        volumes = current.status.volumes if current is not None else {}
        blocker = current.status.message if current is not None else ""
        if not volumes:
            if blocker:
                row.add(Phase.BLOCKED, blocker, max(owned, 1))
            else:
                row.add(Phase.IN_FLIGHT, "", owned)
            return
        for entry in volumes.values():
            if entry.state == S.COMPLETED:
                row.add(Phase.DONE, "", 1)
            elif entry.state == S.ERROR:
                row.add(Phase.BLOCKED, entry.message or "error", 1)
            else:
                row.add(Phase.IN_FLIGHT, "", 1)

    def details(self) -> list[str]:
        """`<node>  <volume>  <state> for <time>[: message]` per volume of the node in flight, then
        `<node>  waiting: <what it waits for> (for <time>)` while its node upgrade waits."""
        manager = self._manager()
        node = manager.status.upgrading_node if manager is not None else ""
        current = self._current(manager, node) if manager is not None and node else None
        if current is None:
            return []
        lines = []
        for name, entry in sorted(current.status.volumes.items()):
            line = f"{node}  {name}  {entry.state or 'undefined'}"
            if parse_time(entry.since) is not None:
                line += f" for {self._held(entry.since)}"
            if entry.message:
                line += f": {entry.message}"
            lines.append(line)
        status = current.status
        if status.message and not is_terminal(status.state):
            held = f" (for {self._held(status.state_since)})" if parse_time(status.state_since) else ""
            lines.append(f"{node}  waiting: {status.message}{held}")
        return lines

    def _held(self, since: str) -> str:
        started = parse_time(since)
        return held_for(self.clock() - started) if started is not None else "-"

    def total(self) -> GroupFigures:
        return GroupFigures.sum(self.groups())

    def finished(self, target: str = "") -> bool:
        """The manager followed has ended; with none at all there is nothing to follow either (as
        `corral progress engine-upgrade` ends at once when there is no wave)."""
        manager = self._manager()
        return manager is None or is_terminal(manager.status.state)


def held_for(seconds: float) -> str:
    """A time in state, to the minute: `<1m`, `4m`, `1h05m`."""
    minutes = max(0, int(seconds)) // 60
    if minutes < 1:
        return "<1m"
    if minutes < 60:
        return f"{minutes}m"
    return f"{minutes // 60}h{minutes % 60:02d}m"
