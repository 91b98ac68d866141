"""Per owner node: how many upgrades are in flight, and which volumes wait for a slot, in order.

This is what makes an event cost O(what it touches): a volume moves between "nothing", "candidate
on node N" and "holding a slot on node N" in O(log n), and filling a freed slot pops the next
candidate of that one node instead of listing every volume as Longhorn does.

Candidate order is deterministic: by (namespace, name). Longhorn takes candidates in Go map order
(unspecified, §1.3 step 5); a fixed order makes plans reproducible and tests exact.

Each node's candidates live in a heap with lazy deletion: a volume that stops being a candidate
leaves its entry behind, recognised as stale by a sequence number, and the heap is rebuilt when
stale entries outnumber live ones.
"""

from __future__ import annotations

import heapq
import itertools

from corral_engine_upgrade.records import VolumeRecord

_QueueEntry = tuple[str, str, int, VolumeRecord]


class NodeSlots:
    def __init__(self) -> None:
        self.in_flight: dict[str, int] = {}
        self.candidate_count: dict[str, int] = {}
        self._queues: dict[str, list[_QueueEntry]] = {}
        self._seq = itertools.count(1)

    def place(self, volume: VolumeRecord, slot_node: str | None, candidate_node: str | None) -> list[str]:
        """Move `volume` to hold a slot on `slot_node` and/or queue on `candidate_node` (None: neither).

        Returns the nodes whose selection may now pick something new: a node that freed a slot, or
        one that gained a candidate.
        """
        dirty: list[str] = []
        if volume.slot_node != slot_node:
            if volume.slot_node is not None:
                _decrement(self.in_flight, volume.slot_node)
                dirty.append(volume.slot_node)
            if slot_node is not None:
                self.in_flight[slot_node] = self.in_flight.get(slot_node, 0) + 1
            volume.slot_node = slot_node
        if volume.candidate_node != candidate_node:
            if volume.candidate_node is not None:
                # The queue entry goes stale by itself (candidate_node no longer matches).
                _decrement(self.candidate_count, volume.candidate_node)
            if candidate_node is not None:
                self.candidate_count[candidate_node] = self.candidate_count.get(candidate_node, 0) + 1
                self._enqueue(candidate_node, volume)
                dirty.append(candidate_node)
            volume.candidate_node = candidate_node
        return dirty

    def _enqueue(self, node: str, volume: VolumeRecord) -> None:
        seq = next(self._seq)
        volume.queue_seq = seq
        queue = self._queues.setdefault(node, [])
        heapq.heappush(queue, (volume.namespace, volume.name, seq, volume))
        if len(queue) > 2 * self.candidate_count.get(node, 0) + 32:
            live = [e for e in queue if _live(e, node)]
            heapq.heapify(live)
            self._queues[node] = live

    def take(self, node: str, count: int) -> list[VolumeRecord]:
        """Remove and return up to `count` candidates of `node`, first by (namespace, name)."""
        queue = self._queues.get(node)
        taken: list[VolumeRecord] = []
        while queue and len(taken) < count:
            entry = heapq.heappop(queue)
            if _live(entry, node):
                volume = entry[3]
                volume.candidate_node = None
                _decrement(self.candidate_count, node)
                taken.append(volume)
        if queue is not None and not queue:
            del self._queues[node]
        return taken

    def nodes_with_candidates(self) -> list[str]:
        return [node for node, count in self.candidate_count.items() if count > 0]


def _live(entry: _QueueEntry, node: str) -> bool:
    volume = entry[3]
    return volume.queue_seq == entry[2] and volume.candidate_node == node and volume.alive


def _decrement(counts: dict[str, int], node: str) -> None:
    left = counts[node] - 1
    if left:
        counts[node] = left
    else:
        del counts[node]
