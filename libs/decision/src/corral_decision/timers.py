"""A decider's alarm clock: "look at this target again at that time", kept once for every service.

A heap of (due, key, token). The same (due, key) asked twice without a token is kept once, so
rules that ask on every decision pass for a wake they still want do not grow the heap. Popping
hands back the keys whose time came, with the token they were set with (expectations.py marks a
deadline with its expectation, to tell a deadline that no longer matters); what looking again
means is the decider's.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class Timers(Generic[K]):
    __slots__ = ("_asked", "_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K, object]] = []
        self._seq = itertools.count()
        self._asked: set[tuple[float, K]] = set()

    def __len__(self) -> int:
        return len(self._heap)

    def at(self, due: float, key: K, token: object = None) -> None:
        """Look at `key` again at `due`. A timer with a token is its own (never merged with an
        ask-again at the same time, which must not be lost if the token's timer turns out stale)."""
        if token is None:
            asked = (due, key)
            if asked in self._asked:
                return
            self._asked.add(asked)
        heapq.heappush(self._heap, (due, next(self._seq), key, token))

    def first_due(self) -> float | None:
        """When the earliest timer comes, stale or not (a cheap test before popping)."""
        return self._heap[0][0] if self._heap else None

    def first(self) -> tuple[float, K, object] | None:
        """The earliest timer (due, key, token), left in place."""
        if not self._heap:
            return None
        due, _, key, token = self._heap[0]
        return due, key, token

    def drop_first(self) -> None:
        due, _, key, token = heapq.heappop(self._heap)
        if token is None:
            self._asked.discard((due, key))

    def due(self, now: float) -> Iterator[tuple[K, object]]:
        """Pop every timer whose time has come, earliest first: (key, token)."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            due, _, key, token = heapq.heappop(heap)
            if token is None:
                self._asked.discard((due, key))
            yield key, token
