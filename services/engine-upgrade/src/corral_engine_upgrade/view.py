"""The engine-upgrade service's incremental view of the cluster, fed by ObjectEvents.

It keeps what §1 of longhorn-behaviour.md reads (volumes with their replicas' nodes, engine images,
Longhorn node names and the two settings) as compact records, and `apply` returns an `Impact`
naming exactly what an event changed for the decider:

* a volume or replica event: that one volume;
* the limit setting: only the per-node trimming (no volume's rules change);
* the default-image setting, or a change to an EngineImage that some volume uses or that is the
  default (its state, controller-API versions, or the nodes it is ready on): every volume's rules
  (`everything`), which the decider re-applies lazily (slots.py), not by scanning.

EngineImage readiness changes are rare (a DaemonSet rollout, a node going down), and a per-node
index of volumes would cost more memory than the whole rest of a volume's record, so there is
none; EngineImages that only change their refCount (every upgrade does) have no impact at all, and
telling so costs one comparison of raw bytes (image_facts.py).

An UNREADABLE marker (the watcher could not decode the object and parked it in LH_DEAD) holds a
volume back until a readable version arrives (flag `UNREADABLE`, reason `unreadable`); its record
keeps the facts last read, so an upgrade it had under way still counts on its owner node. Markers
of the other kinds change nothing: their last known state stays.

Ordering: an event whose resourceVersion is not newer than the one held for that object is
ignored (duplicates, replays, reordering). Deleted objects leave a tombstone for `tombstone_ttl`
seconds so a late, older event cannot resurrect them; it is looked up only for an object the view
does not hold (one it holds was created after any deletion, and its own resourceVersion is newer).
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from typing import Any

import msgspec

from corral_decision.decider import InvalidEvent
from corral_engine_upgrade.image_facts import AnyEngineImage, EngineImageFacts
from corral_engine_upgrade.records import (
    KEY,
    NO_REPLICAS,
    NODE,
    NODE_NAMES,
    RV,
    STRIDE,
    ImageRecord,
    Replicas,
    VolumeRecord,
    node_id,
    replica_key,
    replicas_of,
)
from corral_engine_upgrade.volume_facts import AnyVolume, VolumeFacts
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent

__all__ = ["KIND_STRUCTS", "REQUIRED_KINDS", "ClusterView", "Impact", "InvalidEvent"]

DEFAULT_IMAGE_SETTING = "default-engine-image"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"

# The kinds this service reads (bus tokens) and the slim Struct each decodes into.
KIND_STRUCTS: dict[str, type[Any]] = {
    "volume": VolumeFacts,  # the metadata the rules read, no more (volume_facts.py)
    "replica": lh.Replica,
    "engineimage": EngineImageFacts,  # its node map kept raw (image_facts.py)
    "node": lh.Node,
    "setting": lh.Setting,
}
REQUIRED_KINDS = frozenset(KIND_STRUCTS)
# Also taken as they are: the shared slim EngineImage (tests, snapshots, the simulator's objects).
_ALSO_TAKEN: dict[type[Any], type[Any]] = {EngineImageFacts: lh.EngineImage, VolumeFacts: lh.Volume}

_intern = sys.intern
_RESYNCED = EventType.RESYNCED
_DELETED = EventType.DELETED
_UNREADABLE = EventType.UNREADABLE

# VolumeRecord.flags bit (beside records.py's): the volume's last event was an UNREADABLE marker.
# `VolumeRecord.update_from` recomputes the flags from a readable Volume, which clears it.
UNREADABLE = 32


class Impact(msgspec.Struct, frozen=True, gc=False):
    """What one event changed, in the terms the decider needs."""

    volumes: tuple[VolumeRecord, ...] = ()  # re-evaluate these
    touched: tuple[VolumeRecord, ...] = ()  # a newer resourceVersion, but no fact the rules read
    removed: tuple[VolumeRecord, ...] = ()  # gone from the view
    everything: bool = False  # the rules changed for every volume: re-evaluate all (lazily)
    limit_changed: bool = False
    resynced: str = ""  # a RESYNCED marker for this kind


NO_IMPACT = Impact()
EVERYTHING = Impact(everything=True)
LIMIT_CHANGED = Impact(limit_changed=True)

# What `apply` returns: an Impact, or, for the most frequent one by far (a volume or replica event
# that changed a fact the rules read about one volume), that volume's record itself, which costs
# no allocation: it means Impact(volumes=(record,)).
Change = Impact | VolumeRecord


def normalize_kind(kind: str) -> str:
    """Accept both the bus token (`engineimage`) and the Kubernetes kind (`EngineImage`)."""
    return kind.lower()


class ClusterView:
    def __init__(self, *, tombstone_ttl: float = 600.0, limit_override: int | None = None) -> None:
        self._volumes: dict[str, dict[str, VolumeRecord]] = {}
        # Replicas seen before their volume (or kept after it was deleted), by (namespace, volume).
        self._orphan_replicas: dict[tuple[str, str], Replicas] = {}
        self.images: dict[str, ImageRecord] = {}  # by EngineImage name (`ei-<hash>`); read-only outside
        self._image_names: dict[str, str] = {}  # image → `ei-<hash>` (hashing costs ~1 µs; cache it)
        # EI name → volumes on it. A plain dict: a Counter is a Python subclass of dict, whose item
        # access goes through a slot lookup on every upgrade completing (`_reindex_image`).
        self._ei_users: dict[str, int] = {}
        self._nodes: dict[str, int] = {}  # Longhorn node name → rv (for progress views only)
        self._settings_rv: dict[str, int] = {}
        self._tombstones: dict[tuple[str, str, str], int] = {}
        self._tombstone_expiry: collections.deque[tuple[float, tuple[str, str, str]]] = collections.deque()
        self._tombstone_ttl = tombstone_ttl
        self.synced: set[str] = set()
        self.default_image = ""
        self.default_ei: ImageRecord | None = None  # the EngineImage of default_image, if any
        # The per-node limit the rules apply: Longhorn's setting, or corral's own beside a running
        # longhorn-manager (`limit_override`, coexistence modes act/auto/observe), where Longhorn's
        # setting must stay 0 for Longhorn's own loop to be off.
        self.limit_override = limit_override
        self.limit = 0 if limit_override is None else limit_override
        self.longhorn_limit = 0  # concurrent-automatic-engine-upgrade-per-node-limit, as read
        self.limit_error = ""  # the setting's value when it is not an integer (then: disabled)
        self.volume_count = 0
        # The decoder's message per unreadable volume; read only while its UNREADABLE flag is set
        # (pruned on the next marker, never on the per-event path).
        self._unreadable: dict[tuple[str, str], str] = {}

    # --- queries --------------------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """Every kind the rules read has been listed at least once (RESYNCED seen)."""
        return self.synced >= REQUIRED_KINDS

    def volumes(self) -> Iterator[VolumeRecord]:
        for by_name in self._volumes.values():
            yield from by_name.values()

    def volume(self, namespace: str, name: str) -> VolumeRecord | None:
        by_name = self._volumes.get(namespace)
        return by_name.get(name) if by_name is not None else None

    def image_name(self, image: str) -> str:
        name = self._image_names.get(image)
        if name is None:
            name = self._image_names[image] = _intern(lh.engine_image_name(image))
        return name

    def image(self, image: str) -> ImageRecord | None:
        """The EngineImage for an image string, found by its checksum name as Longhorn does."""
        return self.images.get(self.image_name(image)) if image else None

    def current_engine_image(self, volume: VolumeRecord) -> ImageRecord | None:
        return self.image(volume.current_image)

    @property
    def default_engine_image(self) -> ImageRecord | None:
        return self.default_ei

    def _refresh_default_ei(self) -> None:
        self.default_ei = self.image(self.default_image)

    def node_names(self) -> list[str]:
        return sorted(self._nodes)

    def unreadable_reason(self, volume: VolumeRecord) -> str:
        """Why the volume is unreadable ("" when it is not)."""
        if not volume.flags & UNREADABLE:
            return ""
        return self._unreadable.get((volume.namespace, volume.name), "")

    # --- events ---------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any], now: float) -> Change:
        """Fold one event into the view; what it changed (see `Change`). Raises InvalidEvent for an
        event it cannot read."""
        expiry = self._tombstone_expiry
        if expiry and expiry[0][0] <= now:  # checked here: during a wave there always are some
            self._expire_tombstones(now)
        kind = event.kind
        struct = KIND_STRUCTS.get(kind)
        if struct is None:
            kind = normalize_kind(kind)
            struct = KIND_STRUCTS.get(kind)
            if struct is None:
                return NO_IMPACT  # a kind this service does not read: not an error, just not ours
        event_type = event.type
        if event_type is _RESYNCED:
            self.synced.add(kind)
            return Impact(resynced=kind)
        obj: Any = event.object
        if type(obj) is not struct:
            if event_type is _UNREADABLE:
                return self._apply_unreadable(kind, event, now)
            obj = _as_struct(obj, struct, event)
        # resourceVersions are opaque strings to Kubernetes, but every API server corral meets
        # (etcd, the sandbox) issues increasing integers; -1 means unknown, which ordering accepts.
        try:
            rv = int(event.resource_version or obj.metadata.resource_version)
        except ValueError:
            rv = -1
        # Each kind checks the tombstones itself, and only for an object it does not hold: one it
        # holds was (re)created after any deletion, so its own resourceVersion is the newer bar.
        if kind == "replica":  # the most frequent kind first
            return self._apply_replica(event.namespace, event.name, obj, rv, event_type is _DELETED, now)
        if kind == "volume":
            return self._apply_volume(event.namespace, event.name, obj, rv, event_type is _DELETED, now)
        if kind == "engineimage":
            return self._apply_engine_image(event.namespace, event.name, obj, rv, event_type is _DELETED, now)
        if kind == "setting":
            return self._apply_setting(event.namespace, event.name, obj, rv, event_type is _DELETED, now)
        return self._apply_node(event.namespace, event.name, rv, event_type is _DELETED, now)

    def _buried(self, kind: str, namespace: str, name: str, rv: int, deleted: bool) -> bool:
        """An event, for an object the view does not hold, that is not newer than its deletion."""
        if deleted or not self._tombstones:
            return False
        held = self._tombstones.get((kind, namespace, name))
        return held is not None and _stale(rv, held)

    def _apply_volume(
        self, namespace: str, name: str, volume: AnyVolume, rv: int, deleted: bool, now: float
    ) -> Change:
        by_name = self._volumes.get(namespace)
        if by_name is None:
            by_name = self._volumes[_intern(namespace)] = {}
        record = by_name.get(name)
        if record is not None:
            if 0 <= rv <= record.rv:  # not newer than what is held (see _stale)
                return NO_IMPACT
        elif self._buried("volume", namespace, name, rv, deleted):
            return NO_IMPACT
        if deleted:
            self._tombstone(("volume", namespace, name), max(rv, record.rv if record else -1), now)
            if record is None:
                return NO_IMPACT
            del by_name[name]
            self.volume_count -= 1
            self._unindex(record)
            record.alive = False
            if record.replicas:
                self._orphan_replicas[(namespace, name)] = record.replicas
            return Impact(removed=(record,))
        if record is None:
            orphans = self._orphan_replicas
            replicas = orphans.pop((namespace, name), NO_REPLICAS) if orphans else NO_REPLICAS
            record = VolumeRecord.new(_intern(namespace), name, volume, rv, replicas)
            by_name[name] = record
            self.volume_count += 1
            self._index(record)
            return record
        old_image = record.current_image
        if not record.update_from(volume, rv):
            # Nothing the rules read changed: fresher state itself matters only to a volume
            # waiting for it after a refusal (core.py), so only then is it news.
            desk = record.desk  # its hold, if any (desk.py)
            return Impact(touched=(record,)) if desk is not None and desk.hold_until > now else NO_IMPACT
        if record.current_image is not old_image:  # update_from replaces only a changed value
            self._reindex_image(record, old_image)  # every upgrade completing does this
        return record

    def _apply_unreadable(self, kind: str, event: ObjectEvent[Any], now: float) -> Change:
        """An object that exists at the event's resourceVersion but does not decode."""
        if kind != "volume":
            return NO_IMPACT  # the last known state stays (module docstring)
        namespace, name = event.namespace, event.name
        try:
            rv = int(event.resource_version)
        except ValueError:
            rv = -1
        by_name = self._volumes.get(namespace)
        if by_name is None:
            by_name = self._volumes[_intern(namespace)] = {}
        record = by_name.get(name)
        if record is not None:
            if 0 <= rv <= record.rv:
                return NO_IMPACT
        elif self._buried("volume", namespace, name, rv, False):
            return NO_IMPACT
        else:
            # Known only by name: no image, no owner, so it holds no slot and is nobody's candidate.
            record = VolumeRecord(namespace=_intern(namespace), name=name)
            record.replicas = self._orphan_replicas.pop((namespace, name), NO_REPLICAS)
            by_name[name] = record
            self.volume_count += 1
        record.rv = rv
        record.flags |= UNREADABLE
        self._unreadable = {
            key: reason
            for key, reason in self._unreadable.items()
            if (held := self.volume(*key)) is not None and held.flags & UNREADABLE
        }
        self._unreadable[(record.namespace, name)] = event.reason or "does not decode"
        return record

    def _apply_replica(
        self, namespace: str, name: str, replica: lh.Replica, rv: int, deleted: bool, now: float
    ) -> Change:
        # A replica's volumeName never changes in Longhorn, so the event itself says where it lives.
        volume_name = replica.spec.volume_name
        if not volume_name:
            return NO_IMPACT
        by_name = self._volumes.get(namespace)
        record = by_name.get(volume_name) if by_name is not None else None
        entries = (
            record.replicas
            if record is not None
            else self._orphan_replicas.get((namespace, volume_name), NO_REPLICAS)
        )
        key = replica_key(volume_name, name)
        try:  # where the replica's items start (keys only: a key may equal another item), in C
            at = entries[KEY::STRIDE].index(key) * STRIDE
        except ValueError:
            at = -1
        if at < 0:
            if deleted:
                self._tombstone(("replica", namespace, name), rv, now)
                return NO_IMPACT
            if self._buried("replica", namespace, name, rv, False):
                return NO_IMPACT
            entries = entries + replicas_of(key, node_id(replica.spec.node_id), _held(rv))
            self._set_replicas(namespace, volume_name, record, entries)
            return record if record is not None else NO_IMPACT
        held_rv = entries[at + RV]
        if 0 <= rv <= held_rv:  # not newer than what is held (see _stale)
            return NO_IMPACT
        if deleted:
            self._tombstone(("replica", namespace, name), max(rv, held_rv), now)
            self._set_replicas(namespace, volume_name, record, entries[:at] + entries[at + STRIDE :])
            return record if record is not None else NO_IMPACT
        # The common case, a known replica changed: in place. Keep the newer rv even when it did
        # not move, so older events stay ignored; only a move is news to the rules.
        try:
            entries[at + RV] = rv
        except OverflowError:  # see _held
            entries[at + RV] = -1
        node = replica.spec.node_id
        if NODE_NAMES[entries[at + NODE]] == node:
            return NO_IMPACT
        entries[at + NODE] = node_id(node)
        return record if record is not None else NO_IMPACT

    def _set_replicas(
        self, namespace: str, volume_name: str, record: VolumeRecord | None, entries: Replicas
    ) -> None:
        if record is not None:
            record.replicas = entries
        elif entries:
            self._orphan_replicas[(namespace, volume_name)] = entries
        else:
            self._orphan_replicas.pop((namespace, volume_name), None)

    def _apply_engine_image(
        self, namespace: str, name: str, engine_image: AnyEngineImage, rv: int, deleted: bool, now: float
    ) -> Impact:
        old = self.images.get(name)
        if old is not None:
            if _stale(rv, old.rv):
                return NO_IMPACT
        elif self._buried("engineimage", namespace, name, rv, deleted):
            return NO_IMPACT
        if deleted:
            self._tombstone(("engineimage", namespace, name), max(rv, old.rv if old else -1), now)
            if old is None:
                return NO_IMPACT
            new: ImageRecord | None = None
            del self.images[name]
        else:
            try:
                if old is not None and old.holds_facts_of(engine_image):
                    # Only refCount moved, as it does on every upgrade: keep the record the
                    # volumes' rules already read, with the newer resourceVersion.
                    self.images[name] = msgspec.structs.replace(old, rv=rv)
                    self._refresh_default_ei()
                    return NO_IMPACT
                new = ImageRecord.from_object(engine_image, rv)
            except (msgspec.ValidationError, msgspec.DecodeError) as e:
                raise InvalidEvent(f"engineimage {namespace}/{name}: nodeDeploymentMap: {e}") from e
            self.images[_intern(name)] = new
        self._refresh_default_ei()
        is_default = bool(self.default_image) and name == self.image_name(self.default_image)
        return EVERYTHING if is_default or self._ei_users.get(name, 0) > 0 else NO_IMPACT

    def _apply_setting(
        self, namespace: str, name: str, setting: lh.Setting, rv: int, deleted: bool, now: float
    ) -> Impact:
        if name not in (DEFAULT_IMAGE_SETTING, LIMIT_SETTING):
            return NO_IMPACT
        held = self._settings_rv.get(name)
        if held is not None:
            if _stale(rv, held):
                return NO_IMPACT
        elif self._buried("setting", namespace, name, rv, deleted):
            return NO_IMPACT
        self._settings_rv[name] = rv
        if deleted:
            self._tombstone(("setting", namespace, name), rv, now)
            del self._settings_rv[name]
        value = "" if deleted else setting.value.strip()
        if name == DEFAULT_IMAGE_SETTING:
            if value == self.default_image:
                return NO_IMPACT
            self.default_image = _intern(value)
            self._refresh_default_ei()
            return EVERYTHING
        limit, error = _parse_limit(value)
        if (limit, error) == (self.longhorn_limit, self.limit_error):
            return NO_IMPACT
        self.longhorn_limit, self.limit_error = limit, error
        if self.limit_override is not None:
            return NO_IMPACT  # only whether Longhorn's loop is on changed (the kit asks at each pass)
        self.limit = limit
        return LIMIT_CHANGED

    def _apply_node(self, namespace: str, name: str, rv: int, deleted: bool, now: float) -> Impact:
        held = self._nodes.get(name)
        if held is not None:
            if _stale(rv, held):
                return NO_IMPACT
        elif self._buried("node", namespace, name, rv, deleted):
            return NO_IMPACT
        if deleted:
            self._tombstone(("node", namespace, name), rv, now)
            self._nodes.pop(name, None)
        else:
            self._nodes[_intern(name)] = rv
        return NO_IMPACT

    # --- indexes ----------------------------------------------------------------------------------

    # The EngineImage of a volume's current_image is looked up by name when needed (`image`, its
    # checksum name cached per image), not kept on each of 100 k records.

    def _index(self, record: VolumeRecord) -> None:
        image = record.current_image
        if image:
            users = self._ei_users
            name = self._image_names.get(image) or self.image_name(image)
            users[name] = users.get(name, 0) + 1

    def _unindex(self, record: VolumeRecord, image: str | None = None) -> None:
        """Count `record` off the users of its image (`image`: the one it had, when it changed)."""
        if image is None:
            image = record.current_image
        if image:
            self._ei_users[self._image_names.get(image) or self.image_name(image)] -= 1

    def _reindex_image(self, record: VolumeRecord, old_image: str) -> None:
        self._unindex(record, old_image)
        self._index(record)

    # --- tombstones -------------------------------------------------------------------------------

    def _tombstone(self, key: tuple[str, str, str], rv: int, now: float) -> None:
        self._tombstones[key] = rv
        self._tombstone_expiry.append((now + self._tombstone_ttl, key))

    def _expire_tombstones(self, now: float) -> None:
        expiry = self._tombstone_expiry
        while expiry and expiry[0][0] <= now:
            _, key = expiry.popleft()
            # A key deleted twice has two entries; only the last one (still in the deque) matters,
            # and removing early is harmless: a recreated object carries a newer rv anyway.
            self._tombstones.pop(key, None)


def _held(rv: int) -> int:
    """`rv` as a replica's array can hold it (a signed 64-bit integer, as etcd's revisions are);
    one beyond that, which no API server issues, is kept as unknown (-1) rather than refused."""
    return rv if -(2**63) <= rv < 2**63 else -1


def _stale(incoming: int, held: int) -> bool:
    """True when an event at `incoming` is not newer than what is held (unknown rvs never are)."""
    return incoming >= 0 and held >= 0 and incoming <= held


def _parse_limit(value: str) -> tuple[int, str]:
    """Longhorn reads the limit with GetSettingAsInt; on error the step stops (treated as disabled).
    An absent setting has Longhorn's default, "0"."""
    if not value:
        return 0, ""
    try:
        return int(value), ""
    except ValueError:
        return 0, f"not an integer: {value!r}"


def _as_struct(obj: Any, struct: type[Any], event: ObjectEvent[Any]) -> Any:
    if isinstance(obj, struct) or type(obj) is _ALSO_TAKEN.get(struct):
        return obj
    if obj is None:
        if event.type is EventType.DELETED:
            return struct(metadata=lh.ObjectMeta(name=event.name, namespace=event.namespace))
        raise InvalidEvent(f"{event.type} {event.kind} {event.namespace}/{event.name} carries no object")
    try:
        # A plain mapping (not decoded from the bus): into the shared slim Struct where one is taken.
        return msgspec.convert(obj, _ALSO_TAKEN.get(struct, struct))
    except msgspec.ValidationError as e:
        raise InvalidEvent(f"{event.kind} {event.namespace}/{event.name}: {e}") from e
