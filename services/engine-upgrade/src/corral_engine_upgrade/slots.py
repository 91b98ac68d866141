"""Per owner node: its volumes in order, how many upgrades are in flight, and which volumes wait
for a slot. This is what makes a decision cost O(what it touches) instead of a scan of every volume.

Every owner node keeps:
* `members`: all its volumes sorted by (pick-order rank, namespace, name), the deterministic order
  in which slots are filled: live upgrades first, the long kind (pick_order.py; Longhorn takes
  candidates in Go map order, which is unspecified, §1.3 step 5). A volume whose rank changes
  (it attached or detached) is moved, as one whose owner changes is;
* `in_flight`: volumes holding one of its slots (exact at all times, maintained eagerly);
* `queue`: a heap of volumes known to be candidates under the current rules, with lazy deletion (an
  entry whose volume moved on is recognised as stale by a sequence number and skipped);
* `cursor`: how far through `members` the current rules have been applied.

A bootstrap files every volume of the cluster before anything is decided: an Owners made with
`sort_later` appends them unsorted and sorts each node's members once, when a walk (`take`,
`catch_up`) first needs them in order. Inserting each volume at its place (a bisect calling
`_order` about seven times, and a list insert) was a fifth of a 100 k-volume cold start's
bootstrap; the deferral lasts past the view's completion, as the snapshot's volumes updated after
the RESYNCED markers come after them (most of them, on a cluster that changes). Every (rank,
namespace, name) is a different volume's, so the sorted members are the very list the one-by-one
insertion builds.

When the rules change for everybody (a new default image, at bootstrap) nothing is recomputed up
front: the rules `epoch` advances and every cursor goes back to 0. Filling a slot then walks the
node's members from the cursor, classifying lazily, merged in order with the queue, until the
slots are full. So the first wave after a new default image costs about (nodes x limit)
classifications, not one per volume; the rest of the cluster is classified as slots free up, or in
the background through `catch_up`.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable, Iterator

from corral_engine_upgrade.desk import Desk
from corral_engine_upgrade.pick_order import rank
from corral_engine_upgrade.records import DEAD, FILED_LIVE, VolumeRecord

_QueueEntry = tuple[int, str, str, int, VolumeRecord]  # (rank, namespace, name, seq, volume)
# Applies the rules to a volume and places it (slot, queue, nothing). Called with False for the
# member a walk has reached: a qualifying volume is then not queued; True says "take it now".
Classify = Callable[[VolumeRecord, bool], bool]


def _order(volume: VolumeRecord) -> tuple[int, str, str]:
    """Where `volume` is filed in its owner's members: by the rank it was filed under (its state
    may have changed since; `track` moves it)."""
    # volume.member_rank, read off its flags inline: this is the key of every bisect and walk step
    return (0 if volume.flags & FILED_LIVE else 1, volume.namespace, volume.name)


class OwnerNode:
    __slots__ = ("candidate_count", "cursor", "in_flight", "members", "queue", "unsorted")

    def __init__(self) -> None:
        self.members: list[VolumeRecord] = []
        self.cursor = 0
        self.in_flight = 0
        self.queue: list[_QueueEntry] = []
        self.candidate_count = 0
        self.unsorted = False  # members appended in arrival order, not yet sorted (`sort_later`)

    def sorted_members(self) -> list[VolumeRecord]:
        """The members in filing order (sorted now if they were appended unsorted)."""
        if self.unsorted:
            self.members.sort(key=_order)
            self.unsorted = False
        return self.members

    @property
    def unclassified(self) -> int:
        return len(self.members) - self.cursor


class Owners:
    def __init__(self, sort_later: bool = False) -> None:
        """`sort_later`: append members unsorted until `sort_members()` (see the module docstring)."""
        self._sort_later = sort_later
        self.nodes: dict[str, OwnerNode] = {}
        # Owner nodes whose selection may pick something new (a slot freed, a candidate gained),
        # added to by `place` as it goes; the decider empties it when it decides.
        self.dirty: set[str] = set()
        self.epoch = 0
        self._seq = itertools.count(1)

    def _node(self, name: str) -> OwnerNode:
        node = self.nodes.get(name)
        if node is None:
            node = self.nodes[name] = OwnerNode()
        return node

    # --- membership ---------------------------------------------------------------------------------

    def track(self, volume: VolumeRecord) -> None:
        """Keep `volume` in its owner's members, at its rank (call after its owner or its state may
        have changed, or it died). A queued candidate whose rank changed is queued again."""
        owner = volume.owner if volume.alive else None
        now_rank = rank(volume)
        if volume.member_of == owner and volume.member_rank == now_rank:
            return
        if volume.member_of is not None:
            node = self.nodes[volume.member_of]
            index = _find(node.sorted_members(), volume)
            del node.members[index]
            if index < node.cursor:
                node.cursor -= 1
        reranked = volume.member_rank != now_rank
        volume.member_rank = now_rank
        if reranked and volume.candidate_node is not None:
            self._enqueue(self.nodes[volume.candidate_node], volume, now_rank)
        if owner is not None and self._sort_later:
            node = self._node(owner)
            node.members.append(volume)  # no walk yet (take, catch_up), so no cursor to keep
            node.unsorted = True
        elif owner is not None:
            node = self._node(owner)
            index = bisect.bisect_right(node.sorted_members(), _order(volume), key=_order)
            node.members.insert(index, volume)
            # Inserted behind the cursor: keep the cursor on the same next volume. The caller has
            # classified this one already, like everything else behind the cursor.
            if index < node.cursor:
                node.cursor += 1
        volume.member_of = owner

    def sort_members(self) -> None:
        """Sort what `sort_later` appended, and file every volume at its place from now on."""
        self._sort_later = False
        for node in self.nodes.values():
            node.sorted_members()

    def new_epoch(self) -> None:
        """The rules changed for every volume: classify everything again, lazily."""
        self.epoch += 1
        for node in self.nodes.values():
            node.cursor = 0

    # --- slots and candidates ---------------------------------------------------------------------

    def place(self, volume: VolumeRecord, slot_node: str | None, candidate_node: str | None) -> None:
        """Move `volume` to hold a slot on `slot_node` and/or queue on `candidate_node` (None: neither).

        A node that freed a slot, or gained a candidate, goes into `dirty`.
        """
        dirty = self.dirty
        nodes = self.nodes
        desk = volume.desk  # where both live (desk.py); made here when one is set on none
        if desk is None:
            if slot_node is None and candidate_node is None:
                return  # neither before nor after
            desk = volume.desk = Desk()
        held = desk.slot_node
        if held != slot_node:
            if held is not None:
                nodes[held].in_flight -= 1
                dirty.add(held)
            if slot_node is not None:
                node = nodes.get(slot_node) or self._node(slot_node)
                node.in_flight += 1
            desk.slot_node = slot_node
        queued = desk.candidate_node
        if queued != candidate_node:
            if queued is not None:
                # Its queue entry goes stale by itself (candidate_node no longer matches).
                nodes[queued].candidate_count -= 1
            if candidate_node is not None:
                node = nodes.get(candidate_node) or self._node(candidate_node)
                node.candidate_count += 1
                desk.candidate_node = candidate_node
                self._enqueue(node, volume, rank(volume))
                dirty.add(candidate_node)
            desk.candidate_node = candidate_node

    def _enqueue(self, node: OwnerNode, volume: VolumeRecord, volume_rank: int) -> None:
        """Queue `volume` on `node` (its candidate_node) at `volume_rank`; an older entry goes stale."""
        seq = volume.queue_seq = next(self._seq)
        queue = node.queue
        heapq.heappush(queue, (volume_rank, volume.namespace, volume.name, seq, volume))
        if len(queue) > 2 * node.candidate_count + 32:
            # Drop stale entries, in place: a walk in progress (take) holds this very list.
            name = volume.candidate_node
            queue[:] = [e for e in queue if _live(e, name)]
            heapq.heapify(queue)

    def take(self, name: str, count: int, classify: Classify) -> list[VolumeRecord]:
        """Remove and return up to `count` candidates of owner `name`, first by (rank, namespace,
        name).

        Walks the queue and the not yet classified members in order; `classify` applies the rules
        to a volume (and places it); the member reached, when it qualifies, is taken directly.
        """
        if self._sort_later:
            self.sort_members()  # a walk moves the cursor: from now on, file every volume in place
        node = self.nodes.get(name)
        taken: list[VolumeRecord] = []
        if node is None:
            return taken
        epoch = self.epoch
        members = node.members
        queue = node.queue
        heappop = heapq.heappop
        while len(taken) < count:
            head: _QueueEntry | None = None
            while queue:
                head = queue[0]
                volume = head[4]
                desk = volume.desk
                if (
                    desk is not None
                    and desk.queue_seq == head[3]
                    and desk.candidate_node == name
                    and not volume.flags & DEAD  # alive
                ):
                    break  # the live entry (see _live)
                heappop(queue)
                head = None
            cursor = node.cursor
            member = members[cursor] if cursor < len(members) else None
            if head is not None and (member is None or head[:3] <= _order(member)):
                volume = head[4]
                if volume.epoch != epoch:
                    classify(volume, True)  # queued under older rules: check it still qualifies
                    continue
                heappop(queue)
                volume.candidate_node = None
                node.candidate_count -= 1
                taken.append(volume)
            elif member is not None:
                node.cursor = cursor + 1
                # It comes before every queued candidate: if it qualifies, it is the next one.
                if member.epoch != epoch and classify(member, False):
                    taken.append(member)
            else:
                break
        return taken

    def catch_up(self, budget: int, classify: Classify) -> int:
        """Classify up to `budget` volumes not yet seen under the current rules; returns how many."""
        if self._sort_later:
            self.sort_members()  # as in `take`
        done = 0
        epoch = self.epoch
        for node in self.nodes.values():
            members = node.members
            while node.cursor < len(members) and done < budget:
                volume = members[node.cursor]
                node.cursor += 1
                if volume.epoch != epoch:
                    classify(volume, True)
                    done += 1
            if done >= budget:
                break
        return done

    # --- queries ------------------------------------------------------------------------------------

    def in_flight(self, name: str) -> int:
        node = self.nodes.get(name)
        return node.in_flight if node is not None else 0

    def names(self) -> Iterator[str]:
        return iter(self.nodes)

    def in_flight_by_node(self) -> dict[str, int]:
        return {name: node.in_flight for name, node in self.nodes.items() if node.in_flight}

    def candidates_by_node(self) -> dict[str, int]:
        return {name: node.candidate_count for name, node in self.nodes.items() if node.candidate_count}

    def unclassified(self) -> int:
        return sum(node.unclassified for node in self.nodes.values())


def _find(members: list[VolumeRecord], volume: VolumeRecord) -> int:
    index = bisect.bisect_left(members, _order(volume), key=_order)
    while members[index] is not volume:
        index += 1
    return index


def _live(entry: _QueueEntry, node: str | None) -> bool:
    volume = entry[4]
    return volume.queue_seq == entry[3] and volume.candidate_node == node and volume.alive
