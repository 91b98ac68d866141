"""The record of every successful write, so tests can count what a client actually did to the cluster.

An actuator test asks "how many patches reached volumes?" here instead of trusting the client's own
account. Bounded (oldest records fall off) but `total` keeps counting.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import msgspec


class WriteRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    verb: str  # create | update | patch | delete
    group: str
    plural: str
    kind: str
    namespace: str
    name: str
    resource_version: int | None  # the new resourceVersion; None when nothing was stored (dry run)
    dry_run: bool
    subresource: str  # "" or "status"
    changed: bool  # False for a write that left the object as it was (no new resourceVersion)
    at: float  # time.time() when it was committed
    patch_type: str = ""  # merge | strategic | json for patches


class WriteLog:
    def __init__(self, maxlen: int = 1_000_000) -> None:
        self._records: deque[WriteRecord] = deque(maxlen=maxlen)
        self.total = 0  # records ever added, including those that fell off

    def add(self, record: WriteRecord) -> None:
        self._records.append(record)
        self.total += 1

    def __iter__(self) -> Iterator[WriteRecord]:
        return iter(list(self._records))

    def __len__(self) -> int:
        return len(self._records)

    def records(
        self,
        *,
        verb: str | None = None,
        plural: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        dry_run: bool | None = None,
        subresource: str | None = None,
        since: float | None = None,
    ) -> list[WriteRecord]:
        """The retained records matching every given filter, oldest first."""
        return [
            r
            for r in self._records
            if (verb is None or r.verb == verb)
            and (plural is None or r.plural == plural)
            and (namespace is None or r.namespace == namespace)
            and (name is None or r.name == name)
            and (dry_run is None or r.dry_run == dry_run)
            and (subresource is None or r.subresource == subresource)
            and (since is None or r.at >= since)
        ]

    def count(self, **filters: object) -> int:
        return len(self.records(**filters))  # type: ignore[arg-type]

    def clear(self) -> None:
        self._records.clear()
