"""Optional concurrency limits on settings restarts, cluster-wide and per node.

Longhorn restarts every idle IM whose pod lags the settings at once; an operator may prefer to
roll them (`max_concurrent_im_restarts`, `max_concurrent_im_restarts_per_node`; 0 = unlimited, the
default, as Longhorn). A restart holds its slot from the delete command until the IM runs again on
a new pod (or `restart_timeout_s`), so a replacement that cannot start (no CPU for it, IM-09)
stops the roll instead of taking the next IM down too. IMs due a restart wait per node, in name
order. Deletes of failed pods are never held back: they are not serving anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from corral_im_restart.records import Restart
from corral_im_restart.view import ImKey


class RestartSlots:
    def __init__(self, total_limit: int = 0, node_limit: int = 0) -> None:
        self.total_limit = total_limit
        self.node_limit = node_limit
        self.limited = bool(total_limit or node_limit)
        """Some limit is set (only then do IMs wait for a slot)."""
        self.restarts: dict[ImKey, Restart] = {}
        self._per_node: Counter[str] = Counter()
        self._waiting: dict[str, dict[ImKey, None]] = {}
        self._waits_on: dict[ImKey, str] = {}
        self.freed = False
        """A slot was freed since the waiting IMs were last looked at."""

    def free(self, node: str) -> bool:
        total_ok = not self.total_limit or len(self.restarts) < self.total_limit
        return total_ok and (not self.node_limit or self._per_node[node] < self.node_limit)

    def why_full(self, node: str) -> str:
        if self.total_limit and len(self.restarts) >= self.total_limit:
            return f"{len(self.restarts)} restarts in flight, cluster limit {self.total_limit}"
        return f"{self._per_node[node]} restarts in flight on node {node}, limit {self.node_limit}"

    def start(self, key: ImKey, restart: Restart) -> None:
        self.end(key)
        self.restarts[key] = restart
        self._per_node[restart.node] += 1
        self.unwait(key)

    def end(self, key: ImKey) -> None:
        restart = self.restarts.pop(key, None)
        if restart is not None:
            self._per_node[restart.node] -= 1
            if not self._per_node[restart.node]:
                del self._per_node[restart.node]
            self.freed = True

    def wait(self, key: ImKey, node: str) -> None:
        if self._waits_on.get(key, node) != node:
            self.unwait(key)
        self._waits_on[key] = node
        self._waiting.setdefault(node, {})[key] = None

    def unwait(self, key: ImKey) -> None:
        node = self._waits_on.pop(key, None)
        if node is None:
            return
        waiting = self._waiting[node]
        del waiting[key]
        if not waiting:
            del self._waiting[node]

    def is_waiting(self, key: ImKey) -> bool:
        return key in self._waits_on

    def waiting(self) -> Iterator[tuple[str, list[ImKey]]]:
        """Nodes with IMs waiting for a slot that has one free, each with its IMs in name order."""
        for node in sorted(self._waiting):
            if self.total_limit and len(self.restarts) >= self.total_limit:
                return
            if self.free(node):
                yield node, sorted(self._waiting.get(node, ()))

    def in_flight_by_node(self) -> dict[str, int]:
        return dict(self._per_node)

    def waiting_count(self) -> int:
        return len(self._waits_on)
