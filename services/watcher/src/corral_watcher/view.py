"""What the watcher last published for each object of one kind, and the difference a list makes.

After a 410 (or a periodic resync, or a restart) the watch cannot be resumed: events happened that
the watcher will never see one by one. A fresh list tells what exists now; comparing it with what
was last published yields exactly the events consumers missed: new objects, changed ones, and
DELETED tombstones for the objects that vanished meanwhile. Pure, so it is unit-tested on its own.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import msgspec

from corral_model.envelopes import EventType


class Change(msgspec.Struct, frozen=True, gc=False):
    """One event a list implies: `object` is the new state (the last known one for DELETED)."""

    type: EventType
    object: Any


class PublishedView:
    """Objects of one kind by name, as last published."""

    __slots__ = ("objects",)

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.objects)

    def apply(self, type_: str, obj: Any) -> None:
        """Record a watch event that is being published."""
        if type_ == "DELETED":
            self.objects.pop(obj.metadata.name, None)
        else:
            self.objects[obj.metadata.name] = obj

    def resync(
        self,
        listed: Iterable[Any],
        unreadable: Collection[str] = (),
        placeholders: Mapping[str, Any] | None = None,
    ) -> list[Change]:
        """Replace the view with `listed` and return the changes, in a stable order.

        `unreadable` names objects that exist but could not be decoded: they keep what was last
        published for them (no tombstone: they did not vanish), or, when nothing was, their
        `placeholders` entry (so that their disappearance later yields a tombstone).

        An object whose uid changed (deleted and re-created by name while unseen) yields only its
        ADDED: the subject is per name, and a tombstone between the two would carry a version newer
        than the new object's, which consumers would then ignore as stale.
        """
        before = self.objects
        after: dict[str, Any] = {}
        changes: list[Change] = []
        for obj in listed:
            meta = obj.metadata
            after[meta.name] = obj
            previous = before.get(meta.name)
            if previous is None or previous.metadata.uid != meta.uid:
                changes.append(Change(EventType.ADDED, obj))
            elif previous.metadata.resource_version != meta.resource_version:
                changes.append(Change(EventType.MODIFIED, obj))
        for name, previous in before.items():
            if name in after:
                continue
            if name in unreadable:
                after[name] = previous
            else:
                changes.append(Change(EventType.DELETED, previous))
        if placeholders:
            for name, placeholder in placeholders.items():
                if name not in after and name in unreadable:
                    after[name] = placeholder
        self.objects = after
        return changes
