"""The engine-upgrade service's incremental view of the cluster, fed by ObjectEvents.

It keeps what §1 of longhorn-behaviour.md reads (volumes with their replicas' nodes, engine images,
Longhorn node names and the two settings) as compact records, plus the indexes that let the decider
touch only what an event changed:

* volumes by node (attached node or a replica's node): an engine image becoming ready or unready on
  one node re-evaluates only the volumes there;
* volumes by the EngineImage of their current image: an old image's state or API change
  re-evaluates only its users.

`apply` returns an `Impact` that names exactly which volumes need their rules re-evaluated. Only a
change of the default image (the setting, or the default EngineImage's state or API versions)
re-evaluates everything.

Ordering: an event whose resourceVersion is not newer than the one held for that object is
ignored (duplicates, replays, reordering). Deleted objects leave a tombstone for `tombstone_ttl`
seconds so a late, older event cannot resurrect them.
"""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterator
from typing import Any

import msgspec

from corral_engine_upgrade.records import ImageRecord, ReplicaEntry, VolumeRecord, resource_version
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent

DEFAULT_IMAGE_SETTING = "default-engine-image"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"

# The kinds this service reads (bus tokens) and the slim Struct each decodes into.
KIND_STRUCTS: dict[str, type[Any]] = {
    "volume": lh.Volume,
    "replica": lh.Replica,
    "engineimage": lh.EngineImage,
    "node": lh.Node,
    "setting": lh.Setting,
}
REQUIRED_KINDS = frozenset(KIND_STRUCTS)

_intern = sys.intern


class InvalidEvent(ValueError):
    """An event the view cannot use (unknown kind, malformed object): reported, never applied."""


class Impact(msgspec.Struct, gc=False):
    """What one event changed, in the terms the decider needs."""

    volumes: list[VolumeRecord] = msgspec.field(default_factory=list)  # re-evaluate these
    removed: list[VolumeRecord] = msgspec.field(default_factory=list)  # gone from the view
    everything: bool = False  # the default image changed: re-evaluate every volume
    limit_changed: bool = False
    resynced: str = ""  # a RESYNCED marker for this kind


def normalize_kind(kind: str) -> str:
    """Accept both the bus token (`engineimage`) and the Kubernetes kind (`EngineImage`)."""
    return kind.lower()


class ClusterView:
    def __init__(self, *, tombstone_ttl: float = 600.0) -> None:
        self._volumes: dict[str, dict[str, VolumeRecord]] = {}
        # Replicas seen before their volume (or kept after it was deleted), by (namespace, volume).
        self._orphan_replicas: dict[tuple[str, str], tuple[ReplicaEntry, ...]] = {}
        self._images: dict[str, ImageRecord] = {}
        self._image_names: dict[str, str] = {}  # image → `ei-<hash>` (hashing costs ~1 µs; cache it)
        self._by_node: dict[str, set[VolumeRecord]] = collections.defaultdict(set)
        self._by_current_ei: dict[str, set[VolumeRecord]] = collections.defaultdict(set)
        self._nodes: dict[str, int] = {}  # Longhorn node name → rv (for progress views only)
        self._settings_rv: dict[str, int] = {}
        self._tombstones: dict[tuple[str, str, str], int] = {}
        self._tombstone_expiry: collections.deque[tuple[float, tuple[str, str, str]]] = collections.deque()
        self._tombstone_ttl = tombstone_ttl
        self.synced: set[str] = set()
        self.default_image = ""
        self.limit = 0
        self.limit_error = ""  # the setting's value when it is not an integer (then: disabled)
        self.volume_count = 0

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
        return self._images.get(self.image_name(image)) if image else None

    @property
    def default_engine_image(self) -> ImageRecord | None:
        return self.image(self.default_image)

    def node_names(self) -> list[str]:
        return sorted(self._nodes)

    # --- events ---------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any], now: float) -> Impact:
        """Fold one event into the view. Raises InvalidEvent for an event it cannot read."""
        self._expire_tombstones(now)
        kind = normalize_kind(event.kind)
        struct = KIND_STRUCTS.get(kind)
        if struct is None:
            return Impact()  # a kind this service does not read: not an error, just not ours
        if event.type is EventType.RESYNCED:
            self.synced.add(kind)
            return Impact(resynced=kind)
        obj = _as_struct(event.object, struct, event)
        rv = resource_version(event.resource_version or obj.metadata.resource_version)
        deleted = event.type is EventType.DELETED
        key = (kind, event.namespace, event.name)
        if not deleted and self._is_tombstoned(key, rv):
            return Impact()
        if kind == "volume":
            return self._apply_volume(event.namespace, event.name, obj, rv, deleted, now)
        if kind == "replica":
            return self._apply_replica(event.namespace, event.name, obj, rv, deleted, now)
        if kind == "engineimage":
            return self._apply_engine_image(event.name, obj, rv, deleted, now)
        if kind == "setting":
            return self._apply_setting(event.namespace, event.name, obj, rv, deleted, now)
        return self._apply_node(event.namespace, event.name, rv, deleted, now)

    def _apply_volume(
        self, namespace: str, name: str, volume: lh.Volume, rv: int, deleted: bool, now: float
    ) -> Impact:
        by_name = self._volumes.setdefault(_intern(namespace), {})
        record = by_name.get(name)
        if record is not None and _stale(rv, record.rv):
            return Impact()
        if deleted:
            self._tombstone(("volume", namespace, name), max(rv, record.rv if record else -1), now)
            if record is None:
                return Impact()
            del by_name[name]
            self.volume_count -= 1
            self._unindex(record)
            record.alive = False
            if record.replicas:
                self._orphan_replicas[(namespace, name)] = record.replicas
            return Impact(removed=[record])
        if record is None:
            record = VolumeRecord(namespace=_intern(namespace), name=name)
            record.replicas = self._orphan_replicas.pop((namespace, name), ())
            record.update_from(volume, rv)
            by_name[name] = record
            self.volume_count += 1
            self._index(record)
            return Impact(volumes=[record])
        old_nodes, old_ei = set(record.nodes()), self._current_ei(record)
        record.update_from(volume, rv)
        self._reindex(record, old_nodes, old_ei)
        return Impact(volumes=[record])

    def _apply_replica(
        self, namespace: str, name: str, replica: lh.Replica, rv: int, deleted: bool, now: float
    ) -> Impact:
        # A replica's volumeName never changes in Longhorn, so the event itself says where it lives.
        volume_name = replica.spec.volume_name
        if not volume_name:
            return Impact()
        record = self.volume(namespace, volume_name)
        entries = (
            record.replicas if record is not None else self._orphan_replicas.get((namespace, volume_name), ())
        )
        index = next((i for i, e in enumerate(entries) if e.name == name), -1)
        old = entries[index] if index >= 0 else None
        if old is not None and _stale(rv, old.rv):
            return Impact()
        if deleted:
            self._tombstone(("replica", namespace, name), max(rv, old.rv if old else -1), now)
            if old is None:
                return Impact()
            new_entries = entries[:index] + entries[index + 1 :]
        else:
            entry = ReplicaEntry(name=old.name if old else name, node=_intern(replica.spec.node_id), rv=rv)
            new_entries = (
                (*entries, entry) if old is None else (*entries[:index], entry, *entries[index + 1 :])
            )
            if old is not None and old.node == entry.node:
                # Nothing the rules read changed; keep the newer rv so older events stay ignored.
                self._set_replicas(namespace, volume_name, record, new_entries)
                return Impact()
        if record is None:
            self._set_replicas(namespace, volume_name, None, new_entries)
            return Impact()
        old_nodes = set(record.nodes())
        self._set_replicas(namespace, volume_name, record, new_entries)
        self._reindex(record, old_nodes, self._current_ei(record))
        return Impact(volumes=[record])

    def _set_replicas(
        self, namespace: str, volume_name: str, record: VolumeRecord | None, entries: tuple[ReplicaEntry, ...]
    ) -> None:
        if record is not None:
            record.replicas = entries
        elif entries:
            self._orphan_replicas[(namespace, volume_name)] = entries
        else:
            self._orphan_replicas.pop((namespace, volume_name), None)

    def _apply_engine_image(
        self, name: str, engine_image: lh.EngineImage, rv: int, deleted: bool, now: float
    ) -> Impact:
        old = self._images.get(name)
        if old is not None and _stale(rv, old.rv):
            return Impact()
        if deleted:
            self._tombstone(("engineimage", "", name), max(rv, old.rv if old else -1), now)
            if old is None:
                return Impact()
            new: ImageRecord | None = None
            del self._images[name]
        else:
            new = ImageRecord.from_object(engine_image, rv)
            self._images[new.name] = new
        is_default = bool(self.default_image) and name == self.image_name(self.default_image)
        if old is None or new is None or _facts_changed(old, new):
            if is_default:
                return Impact(everything=True)
            return Impact(volumes=list(self._by_current_ei.get(name, ())))
        changed_nodes = old.ready_nodes ^ new.ready_nodes
        if not changed_nodes:
            return Impact()
        touched: dict[int, VolumeRecord] = {}
        for node in changed_nodes:
            for record in self._by_node.get(node, ()):
                if is_default or self._current_ei(record) == name:
                    touched[id(record)] = record
        return Impact(volumes=list(touched.values()))

    def _apply_setting(
        self, namespace: str, name: str, setting: lh.Setting, rv: int, deleted: bool, now: float
    ) -> Impact:
        if name not in (DEFAULT_IMAGE_SETTING, LIMIT_SETTING):
            return Impact()
        held = self._settings_rv.get(name)
        if held is not None and _stale(rv, held):
            return Impact()
        self._settings_rv[name] = rv
        if deleted:
            self._tombstone(("setting", namespace, name), rv, now)
            del self._settings_rv[name]
        value = "" if deleted else setting.value.strip()
        if name == DEFAULT_IMAGE_SETTING:
            if value == self.default_image:
                return Impact()
            self.default_image = _intern(value)
            return Impact(everything=True)
        limit, error = _parse_limit(value)
        if (limit, error) == (self.limit, self.limit_error):
            return Impact()
        self.limit, self.limit_error = limit, error
        return Impact(limit_changed=True)

    def _apply_node(self, namespace: str, name: str, rv: int, deleted: bool, now: float) -> Impact:
        held = self._nodes.get(name)
        if held is not None and _stale(rv, held):
            return Impact()
        if deleted:
            self._tombstone(("node", namespace, name), rv, now)
            self._nodes.pop(name, None)
        else:
            self._nodes[_intern(name)] = rv
        return Impact()

    # --- indexes ----------------------------------------------------------------------------------

    def _current_ei(self, record: VolumeRecord) -> str:
        return self.image_name(record.current_image) if record.current_image else ""

    def _index(self, record: VolumeRecord) -> None:
        for node in record.nodes():
            self._by_node[node].add(record)
        ei = self._current_ei(record)
        if ei:
            self._by_current_ei[ei].add(record)

    def _unindex(self, record: VolumeRecord) -> None:
        for node in record.nodes():
            _discard(self._by_node, node, record)
        ei = self._current_ei(record)
        if ei:
            _discard(self._by_current_ei, ei, record)

    def _reindex(self, record: VolumeRecord, old_nodes: set[str], old_ei: str) -> None:
        new_nodes = set(record.nodes())
        if new_nodes != old_nodes:
            for node in old_nodes - new_nodes:
                _discard(self._by_node, node, record)
            for node in new_nodes - old_nodes:
                self._by_node[node].add(record)
        new_ei = self._current_ei(record)
        if new_ei != old_ei:
            if old_ei:
                _discard(self._by_current_ei, old_ei, record)
            if new_ei:
                self._by_current_ei[new_ei].add(record)

    # --- tombstones -------------------------------------------------------------------------------

    def _tombstone(self, key: tuple[str, str, str], rv: int, now: float) -> None:
        self._tombstones[key] = rv
        self._tombstone_expiry.append((now + self._tombstone_ttl, key))

    def _is_tombstoned(self, key: tuple[str, str, str], rv: int) -> bool:
        held = self._tombstones.get(key)
        return held is not None and _stale(rv, held)

    def _expire_tombstones(self, now: float) -> None:
        expiry = self._tombstone_expiry
        while expiry and expiry[0][0] <= now:
            _, key = expiry.popleft()
            # A key deleted twice has two entries; only the last one (still in the deque) matters,
            # and removing early is harmless: a recreated object carries a newer rv anyway.
            self._tombstones.pop(key, None)


def _stale(incoming: int, held: int) -> bool:
    """True when an event at `incoming` is not newer than what is held (unknown rvs never are)."""
    return incoming >= 0 and held >= 0 and incoming <= held


def _facts_changed(old: ImageRecord, new: ImageRecord) -> bool:
    """Changes to an EngineImage that matter to every volume using it (not just some nodes)."""
    return (
        old.state_ok != new.state_ok
        or old.image != new.image
        or old.controller_api_version != new.controller_api_version
        or old.controller_api_min_version != new.controller_api_min_version
    )


def _parse_limit(value: str) -> tuple[int, str]:
    """Longhorn reads the limit with GetSettingAsInt; on error the step stops (treated as disabled).
    An absent setting has Longhorn's default, "0"."""
    if not value:
        return 0, ""
    try:
        return int(value), ""
    except ValueError:
        return 0, f"not an integer: {value!r}"


def _discard(index: dict[str, set[VolumeRecord]], key: str, record: VolumeRecord) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(record)
        if not members:
            del index[key]


def _as_struct(obj: Any, struct: type[Any], event: ObjectEvent[Any]) -> Any:
    if isinstance(obj, struct):
        return obj
    if obj is None:
        if event.type is EventType.DELETED:
            return struct(metadata=lh.ObjectMeta(name=event.name, namespace=event.namespace))
        raise InvalidEvent(f"{event.type} {event.kind} {event.namespace}/{event.name} carries no object")
    try:
        return msgspec.convert(obj, struct)
    except msgspec.ValidationError as e:
        raise InvalidEvent(f"{event.kind} {event.namespace}/{event.name}: {e}") from e
