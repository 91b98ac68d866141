"""The bounded change history of one resource type, from which watches replay and follow.

kube-apiserver's watch cache keeps a window of recent events per resource; a watch that starts from a
resourceVersion inside the window replays what came after it, one older than the window gets
`410 Gone`. Here each resource type has such a window: a list with an absolute start offset, so a
watch holds a plain integer position and reads batches by slicing. Waiting watches share one future
that the next appended change resolves.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Mapping
from typing import Literal

import msgspec

EventType = Literal["ADDED", "MODIFIED", "DELETED"]


class Change(msgspec.Struct, frozen=True, gc=False):
    """One committed write as watchers see it: the object's bytes at `rv` and what it was before.

    `gc=False`: it holds only atoms and string dicts, so the garbage collector never needs to walk it,
    and a history of hundreds of thousands of changes adds nothing to collection pauses.
    """

    rv: int
    type: EventType
    namespace: str
    name: str
    raw: bytes
    labels: Mapping[str, str] | None
    prev_raw: bytes | None
    prev_labels: Mapping[str, str] | None


class History:
    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._slack = max(1, self.size // 8)  # trim in steps so appends stay O(1) amortized
        self.changes: list[Change] = []
        self.start = 0  # absolute position of changes[0]
        self.expired_rv = 0  # a watch from an rv below this has missed changes
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False

    @property
    def end(self) -> int:
        return self.start + len(self.changes)

    def append(self, change: Change) -> None:
        self.changes.append(change)
        if len(self.changes) > self.size + self._slack:
            self._drop(len(self.changes) - self.size)
        self.wake()

    def _drop(self, count: int) -> None:
        if count <= 0:
            return
        self.expired_rv = max(self.expired_rv, self.changes[count - 1].rv)
        del self.changes[:count]
        self.start += count

    def compact(self, rv: int) -> None:
        """Forget every change (what a compaction does): watches from an older rv get 410."""
        self._drop(len(self.changes))
        self.expired_rv = max(self.expired_rv, rv)

    def position_after(self, rv: int) -> int | None:
        """Absolute position of the first change newer than `rv`, or None when `rv` is too old."""
        if rv < self.expired_rv:
            return None
        return self.start + bisect_right(self.changes, rv, key=lambda c: c.rv)

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        self.closed = True
        self.wake()

    async def wait(self, within_s: float) -> None:
        """Return when a change is appended (or the history closes), or after `within_s` seconds."""
        if self._waiter is None:
            self._waiter = asyncio.get_running_loop().create_future()
        await asyncio.wait((self._waiter,), timeout=max(0.0, within_s))
