"""Which volumes block a group-A or group-B setting, kept incrementally so the precondition is
O(1) per event: a volume event moves one name in or out of a set, and the precondition is "the set
is empty". The sets hold only the blocking volumes, for `explain` to name them.

Group A (§3.3): every volume must have `status.state == detached`; attaching, attached, detaching,
creating and a volume with no state yet all block. Group B: only RWX volumes that are not
migratable block, and corral reads "not detached" where Longhorn reads "has attachment tickets in
its VolumeAttachment" (corral does not watch VolumeAttachments; see the service README).
"""

from __future__ import annotations

import heapq

from corral_model.longhorn import Volume

DETACHED = "detached"
RWX = "rwx"


def blocks_all_detached(volume: Volume) -> bool:
    return volume.status.state != DETACHED


def blocks_rwx_detached(volume: Volume) -> bool:
    spec = volume.spec
    return spec.access_mode == RWX and not spec.migratable and volume.status.state != DETACHED


class AttachmentIndex:
    """The volumes that are not detached (all, and RWX non-migratable), by name."""

    __slots__ = ("attached", "moves", "rwx_attached")

    def __init__(self) -> None:
        self.attached: set[str] = set()
        self.rwx_attached: set[str] = set()
        self.moves = 0
        """Bumped whenever a volume enters or leaves either set (the blockers named changed)."""

    def apply(self, name: str, volume: Volume | None) -> tuple[bool, bool]:
        """Fold one volume in (None: deleted). Returns whether the group-A and the group-B
        precondition flipped (held → failed or failed → held)."""
        sizes = len(self.attached), len(self.rwx_attached)
        a = _move(self.attached, name, volume is not None and blocks_all_detached(volume))
        b = _move(self.rwx_attached, name, volume is not None and blocks_rwx_detached(volume))
        if sizes != (len(self.attached), len(self.rwx_attached)):
            self.moves += 1
        return a, b

    @property
    def all_detached(self) -> bool:
        return not self.attached

    @property
    def rwx_detached(self) -> bool:
        return not self.rwx_attached


def _move(names: set[str], name: str, blocking: bool) -> bool:
    """Put `name` in or out of `names`; True when the set went from empty to not, or back."""
    was_empty = not names
    if blocking:
        names.add(name)
    else:
        names.discard(name)
    return was_empty != (not names)


def name_some(names: set[str], one: str, many: str, limit: int = 5) -> str:
    """`3 attached volumes: pvc-a, pvc-b, pvc-c`: the count and the first `limit` names, then `…`.
    (`explain` and the status only: O(n) in the blocking volumes, never per event.)"""
    shown = heapq.nsmallest(limit, names)
    more = ", …" if len(names) > limit else ""
    return f"{len(names)} {one if len(names) == 1 else many}: {', '.join(shown)}{more}"
