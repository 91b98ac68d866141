"""The kit for deciders keyed by object: targets are `(kind, namespace, name)`, their tracks and
resourceVersions kept by the kit. What most deciders need, so a new one writes only its rules.

A decider subclasses `DeciderBase`, calls `observe(event)` first in its `apply`, sends every command
through `issue` from its `reconcile(now)`, and settles what its view shows (`settle`,
`settle_if_fresher`); it overrides `may_adopt` to say whether another replica's command can still
apply, and `look_again` to hear of a target freed, expired or due (kit.py says what else it may).
"""

from __future__ import annotations

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
    def __init__(
        self, clock: Clock, reads: Iterable[str], timing: Timing | None = None, service: str = ""
    ) -> None:
        super().__init__(clock, timing, service)
        self._unlisted = set(reads)
        self.versions: dict[TargetKey, int] = {}
        self._tracks: dict[TargetKey, TargetTrack] = {}

    @property
    def ready(self) -> bool:
        return not self._unlisted

    def observe(self, event: ObjectEvent[Any]) -> TargetKey | None:
        """Book-keep one event: a RESYNCED marker lists its kind; an object's resourceVersion is
        remembered (forgotten when deleted, with what the kit tracked on it). Returns the object's
        key; None for a marker, and for a state no newer than the one held (a duplicate, or an
        older event delivered late): applying it would take the view back in time, and nothing
        would bring it forward again until the object next changes."""
        if event.type is EventType.RESYNCED:
            self._unlisted.discard(event.kind)
            return None
        key = (KINDS[event.kind].kind, event.namespace, event.name)
        if event.type is EventType.DELETED:
            self.versions.pop(key, None)
            track = self._tracks.pop(key, None)
            if track is not None:
                self.expected.settle(track)
            return key
        rv = int(event.resource_version or 0)
        held = self.versions.get(key)
        if held is not None and 0 < rv <= held:
            return None
        self.versions[key] = rv
        return key

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
