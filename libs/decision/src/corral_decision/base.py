"""The kit for deciders keyed by object: targets are `(kind, namespace, name)`, their tracks and
resourceVersions kept by the kit. What most deciders need, so a new one writes only its rules.

A decider subclasses `DeciderBase`, calls `observe(event)` first in its `apply`, sends every command
through `issue` from its `reconcile(now)`, and settles what its view shows (`settle`,
`settle_if_fresher`); it overrides `may_adopt` to say whether another replica's command can still
apply, and `look_again` to hear of a target freed, expired or due (kit.py says what else it may).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import Any

from corral_decision.decider import Clock
from corral_decision.expectations import TargetTrack, Track
from corral_decision.kit import DeciderKit
from corral_decision.timing import Timing
from corral_model.envelopes import EventType, ObjectEvent, Target
from corral_model.kinds import KINDS

TargetKey = tuple[str, str, str]
"""(Kind, namespace, name), as a `Target` names an object."""


def key_of(target: Target) -> TargetKey:
    return (target.kind, target.namespace, target.name)


class DeciderBase(DeciderKit[TargetKey]):
    TOMBSTONE_TTL = 600.0
    """How long a deleted object's last resourceVersion is kept to refuse older events of it that
    arrive after its delete (engine-upgrade's view keeps its own, `tombstone_ttl_s`, as long)."""

    def __init__(
        self, clock: Clock, reads: Iterable[str], timing: Timing | None = None, service: str = ""
    ) -> None:
        super().__init__(clock, timing, service)
        self._unlisted = set(reads)
        self.versions: dict[TargetKey, int] = {}
        self._tracks: dict[TargetKey, TargetTrack] = {}
        self.tombstones: dict[TargetKey, int] = {}
        """Deleted objects: the resourceVersion at their delete. An event of one not newer than
        that is a late copy of its past (a replay, a duplicate): it must not bring it back."""
        self._tombstone_expiry: collections.deque[tuple[float, TargetKey]] = collections.deque()

    @property
    def ready(self) -> bool:
        return not self._unlisted

    def observe(self, event: ObjectEvent[Any]) -> TargetKey | None:
        """Book-keep one event: a RESYNCED marker lists its kind; an object's resourceVersion is
        remembered (when deleted, with what the kit tracked on it, it is forgotten and a tombstone
        left for `TOMBSTONE_TTL`). Returns the object's key; None for a marker, and for a state no
        newer than the one held or than the object's delete (a duplicate, or an older event
        delivered late): applying it would take the view back in time (or bring a deleted object
        back), and nothing would bring it forward again until the object next changes."""
        if event.type is EventType.RESYNCED:
            self._unlisted.discard(event.kind)
            return None
        key = (KINDS[event.kind].kind, event.namespace, event.name)
        rv = int(event.resource_version or 0)
        held = self.versions.get(key)
        if event.type is EventType.DELETED:
            if held is not None and 0 < rv < held:
                return None  # the delete of an earlier incarnation: the one held was created since
            self.versions.pop(key, None)
            track = self._tracks.pop(key, None)
            if track is not None:
                self.expected.settle(track)
            self._bury(key, max(rv, held or 0))
            return key
        if held is None and self.tombstones:
            buried = self.tombstones.get(key)
            if buried is not None and 0 < rv <= buried:
                return None
            self.tombstones.pop(key, None)  # (created again: its own versions are the bar now)
        elif held is not None and 0 < rv <= held:
            return None
        self.versions[key] = rv
        return key

    def _bury(self, key: TargetKey, rv: int) -> None:
        now = self.clock()
        expiry = self._tombstone_expiry
        while expiry and expiry[0][0] <= now:
            _, old = expiry.popleft()
            # a key buried twice has two entries: dropping early is harmless (a recreated object
            # carries a newer resourceVersion anyway)
            self.tombstones.pop(old, None)
        if rv > 0:
            self.tombstones[key] = rv
            expiry.append((now + self.TOMBSTONE_TTL, key))

    # --- the kit's hooks, answered from the kit's own tables -----------------------------------------

    def key_for(self, target: Target) -> TargetKey | None:
        return key_of(target)

    def track_at(self, key: TargetKey, create: bool = False) -> Track | None:
        track = self._tracks.get(key)
        if track is None and create:
            track = self._tracks[key] = TargetTrack()
        return track

    def version_at(self, key: TargetKey) -> int | None:
        return self.versions.get(key)

    def tracks(self) -> Iterable[Track]:
        return self._tracks.values()
