"""The object store: every resource type kept the same generic way, written the way etcd + the
apiserver's generic registry would write it.

Objects are kept as their encoded JSON bytes (plus their labels for selector matching): a list is a
byte join, a watch event is the stored bytes between a prefix and a suffix, and every write decodes a
private copy to change, so no object is ever shared or deep-copied. One global resourceVersion counter
orders every write; each resource type keeps its own bounded change history for watches.
"""

from __future__ import annotations

import base64
import copy
import re
import secrets
import string
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from corral_sandbox.emulator import errors
from corral_sandbox.emulator.admission import Admission
from corral_sandbox.emulator.errors import ApiError
from corral_sandbox.emulator.history import Change, EventType, History
from corral_sandbox.emulator.nulls import prune_nulls
from corral_sandbox.emulator.patching import PatchError, json_patch, merge_patch
from corral_sandbox.emulator.resources import BUILTINS, CRD_GROUP, ResourceType, from_crd
from corral_sandbox.emulator.selectors import FieldSelector, LabelSelector
from corral_sandbox.emulator.writelog import WriteLog, WriteRecord

encode = msgspec.json.Encoder().encode
decode = msgspec.json.Decoder().decode

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped kinds

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_NOT_SPEC = frozenset(("apiVersion", "kind", "metadata", "status"))
_NOT_SPEC_NO_STATUS_SUBRESOURCE = frozenset(("apiVersion", "kind", "metadata"))
_SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")
_INITIAL_STATUS: dict[tuple[str, str], Obj] = {
    ("", "pods"): {"phase": "Pending"},
    ("", "namespaces"): {"phase": "Active"},
}
_GENERATE_ALPHABET = string.ascii_lowercase + string.digits


class Entry(msgspec.Struct, frozen=True, gc=False):
    """A stored object: its JSON bytes, its labels (for selectors) and its resourceVersion.

    `gc=False` (it holds only atoms and a string dict): 100 000 stored objects cost no GC time.
    """

    raw: bytes
    labels: dict[str, str] | None
    rv: int


class Collection:
    """All objects of one resource type, in every namespace, with its change history."""

    __slots__ = ("_sorted", "history", "objects", "rt")

    def __init__(self, rt: ResourceType, history_size: int) -> None:
        self.rt = rt
        self.objects: dict[Key, Entry] = {}
        self.history = History(history_size)
        self._sorted: list[Key] | None = None

    def sorted_keys(self) -> list[Key]:
        """Keys in etcd order (namespace, then name); cached until an object is added or removed."""
        if self._sorted is None:
            self._sorted = sorted(self.objects)
        return self._sorted


class _Clock:
    """RFC 3339 timestamps with second precision, as metadata timestamps are, formatted once a second."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._second = -1
        self._text = ""

    def stamp(self) -> str:
        second = int(self._now())
        if second != self._second:
            self._second = second
            self._text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
        return self._text


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if meta is None:
        meta = obj["metadata"] = {}
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata: must be an object")
    return meta


def _next_state(rt: ResourceType, old: Obj, proposed: Obj, subresource: str) -> Obj:
    """What a PUT or PATCH may change: through /status only the status; through the main resource
    everything but the status, when the kind has a status subresource."""
    if subresource == "status":
        new = dict(old)
        _set_status(new, proposed.get("status"))
        return new
    if rt.status_subresource:
        _set_status(proposed, old.get("status"))
    return proposed


def _spec_changed(rt: ResourceType, old: Obj, new: Obj) -> bool:
    skip = _NOT_SPEC if rt.status_subresource else _NOT_SPEC_NO_STATUS_SUBRESOURCE
    for k, v in new.items():
        if k not in skip and (k not in old or old[k] != v):
            return True
    return any(k not in skip and k not in new for k in old)


def _set_status(target: Obj, status: Any) -> None:
    if status is None:
        target.pop("status", None)
    else:
        target["status"] = status


class Store:
    def __init__(
        self,
        *,
        history_size: int = 10_000,
        admission: Admission | None = None,
        write_log: WriteLog | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.rv = 0
        self.history_size = history_size
        self.admission = admission if admission is not None else Admission()
        self.write_log = write_log if write_log is not None else WriteLog()
        self._now = now
        self._clock = _Clock(now)
        self.types: dict[tuple[str, str, str], ResourceType] = {}  # (group, version, plural)
        self.collections: dict[tuple[str, str], Collection] = {}  # (group, plural)
        for rt in BUILTINS:
            self._register(rt)

    # --- resource types ---------------------------------------------------------------------------

    def _register(self, rt: ResourceType) -> None:
        self.types[(rt.group, rt.version, rt.plural)] = rt
        if rt.key not in self.collections:
            self.collections[rt.key] = Collection(rt, self.history_size)
        else:
            self.collections[rt.key].rt = rt

    def resource(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def resource_any_version(self, group: str, plural: str) -> ResourceType | None:
        coll = self.collections.get((group, plural))
        return coll.rt if coll is not None else None

    def _sync_crd(self, old: Obj | None, new: Obj | None) -> None:
        """Serve (or stop serving) the resource types a CRD declares, as the apiextensions server does."""
        if old is not None:
            for rt in from_crd(old):
                self.types.pop((rt.group, rt.version, rt.plural), None)
        if new is not None:
            for rt in from_crd(new):
                self._register(rt)
        elif old is not None:
            for rt in from_crd(old)[:1]:
                coll = self.collections.pop(rt.key, None)
                if coll is not None:
                    coll.history.close()

    def _check_crd(self, crd: Obj) -> None:
        try:
            types = from_crd(crd)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            name = str((crd.get("metadata") or {}).get("name", ""))
            raise errors.invalid(self._crd_type, name, "spec", str(e)) from None
        builtin = {b.key for b in BUILTINS}
        for rt in types:
            if rt.key in builtin:
                raise errors.invalid(
                    self._crd_type, rt.qualified, "spec.group", "collides with a built-in resource"
                )

    @property
    def _crd_type(self) -> ResourceType:
        return self.types[(CRD_GROUP, "v1", "customresourcedefinitions")]

    def _collection(self, rt: ResourceType) -> Collection:
        coll = self.collections.get(rt.key)
        if coll is None:
            raise errors.page_not_found(rt.qualified)
        return coll

    # --- reads ------------------------------------------------------------------------------------

    def _key(self, rt: ResourceType, namespace: str, name: str) -> Key:
        return (namespace if rt.namespaced else "", name)

    def get_raw(self, rt: ResourceType, namespace: str, name: str) -> bytes:
        entry = self._collection(rt).objects.get(self._key(rt, namespace, name))
        if entry is None:
            raise errors.not_found(rt, name)
        return entry.raw

    def select(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
        *,
        limit: int = 0,
        continue_token: str = "",
    ) -> tuple[list[bytes], int, str, int | None]:
        """Objects for a list: (raw objects, list resourceVersion, continue token, remaining count)."""
        coll = self._collection(rt)
        start = 0
        keys = coll.sorted_keys()
        rv = self.rv
        if continue_token:
            try:
                token = decode(base64.urlsafe_b64decode(continue_token))
                after = (token["start"][0], token["start"][1])
            except Exception:
                raise errors.bad_request("continue key is not valid: incorrect encoded start key") from None
            from bisect import bisect_right

            start = bisect_right(keys, after)
        items: list[bytes] = []
        objects = coll.objects
        filtered = labels is not None or fields is not None or namespace is not None
        last: Key | None = None
        i = start
        n = len(keys)
        while i < n:
            key = keys[i]
            i += 1
            if namespace is not None and key[0] != namespace:
                continue
            entry = objects[key]
            if labels is not None and not labels.matches(entry.labels):
                continue
            if fields is not None:
                if not fields.matches_key(key[0], key[1]):
                    continue
                if fields.needs_object and not fields.matches_object(decode(entry.raw)):
                    continue
            items.append(entry.raw)
            last = key
            if limit and len(items) >= limit:
                break
        more = limit > 0 and last is not None and i < n
        next_token = ""
        remaining: int | None = None
        if more and last is not None:
            next_token = base64.urlsafe_b64encode(encode({"rv": rv, "start": list(last)})).decode()
            if not filtered:
                remaining = n - i
        return items, rv, next_token, remaining

    # --- writes -----------------------------------------------------------------------------------

    def create(
        self, rt: ResourceType, namespace: str, body: Any, *, dry_run: bool = False, trusted: bool = False
    ) -> bytes:
        """POST: store a new object. `trusted` (the in-process loader) keeps status and skips admission."""
        coll = self._collection(rt)
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._check_type(rt, body)
        meta = _meta(body)
        name = meta.get("name") or ""
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rt, "", "metadata.name", "Required value: name or generateName is required"
                )
            name = prefix + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
        self._check_name(rt, name)
        self._check_meta(rt, name, meta)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            if not namespace:
                raise errors.bad_request(
                    "the server could not find the requested resource: a namespace is required"
                )
        else:
            namespace = ""
        key = (namespace, name)
        if key in coll.objects:
            raise errors.already_exists(rt, name)
        new_meta: Obj = {"name": name}
        if rt.namespaced:
            new_meta["namespace"] = namespace
        for k, v in meta.items():
            if (
                k not in new_meta
                and k not in _SYSTEM_META
                and k not in ("resourceVersion", "selfLink", "managedFields")
            ):
                new_meta[k] = v
        new_meta["uid"] = meta.get("uid") if trusted and meta.get("uid") else str(uuid.uuid4())
        new_meta["resourceVersion"] = ""
        if rt.tracks_generation:
            new_meta["generation"] = 1
        new_meta["creationTimestamp"] = (
            meta.get("creationTimestamp")
            if trusted and meta.get("creationTimestamp")
            else self._clock.stamp()
        )
        obj: Obj = {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": new_meta}
        for k, v in body.items():
            if k not in ("apiVersion", "kind", "metadata"):
                obj[k] = v
        if not trusted and rt.status_subresource and not rt.create_keeps_status:
            _set_status(obj, copy.deepcopy(_INITIAL_STATUS.get(rt.key)))
        obj = prune_nulls(obj, rt.schema)
        if rt.is_crd:
            self._check_crd(obj)
            obj["status"] = self._crd_status(obj)
        if not trusted and self.admission.hooked and self.admission.has_hooks(rt.key):
            obj = self.admission.mutate(rt.key, "CREATE", None, copy.deepcopy(obj), False)
            self.admission.validate(rt.key, "CREATE", None, obj, False)
        return self._commit(coll, key, obj, None, "ADDED", "create", "", dry_run)

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> bytes:
        """PUT: replace the object (or only its status through /status), guarded by resourceVersion."""
        coll, key, entry = self._existing(rt, namespace, name)
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be a JSON object")
        self._check_type(rt, body)
        meta = _meta(body)
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        old = decode(entry.raw)
        self._check_preconditions(rt, name, entry, old, meta.get("resourceVersion"), meta.get("uid"))
        new = _next_state(rt, old, dict(body), subresource)
        return self._apply_update(coll, rt, key, entry, old, new, "update", subresource, dry_run)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        patch_type: str,
        patch_body: bytes,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> bytes:
        """PATCH with `merge`, `strategic` (treated as merge) or `json` (RFC 6902) semantics."""
        coll, key, entry = self._existing(rt, namespace, name)
        try:
            patch = decode(patch_body)
        except msgspec.DecodeError as e:
            raise errors.bad_request(f"error decoding patch: {e}") from None
        old = decode(entry.raw)
        if patch_type == "json":
            try:
                patched = json_patch(decode(entry.raw), patch)
            except TypeError as e:
                raise errors.bad_request(str(e)) from None
            except PatchError as e:
                raise ApiError(
                    422,
                    "Invalid",
                    "the server rejected our request due to an error in our request",
                    {"causes": [{"message": str(e)}]},
                ) from None
        else:
            if not isinstance(patch, dict):
                raise errors.bad_request(
                    "json: cannot unmarshal non-object into Go value of type map[string]interface {}"
                )
            patched = merge_patch(old, patch)
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata", {}), dict):
            raise errors.bad_request("the patched object must be a JSON object with object metadata")
        pmeta = patched.get("metadata") or {}
        for field in ("name", "namespace"):
            if pmeta.get(field, old["metadata"].get(field)) != old["metadata"].get(field):
                raise errors.invalid(rt, name, f"metadata.{field}", "Invalid value: field is immutable")
        rv = pmeta.get("resourceVersion")
        self._check_preconditions(
            rt,
            name,
            entry,
            old,
            rv if rv != old["metadata"].get("resourceVersion") else None,
            pmeta.get("uid"),
        )
        new = _next_state(rt, old, patched, subresource)
        return self._apply_update(coll, rt, key, entry, old, new, "patch", subresource, dry_run, patch_type)

    def delete(
        self, rt: ResourceType, namespace: str, name: str, options: Any = None, *, dry_run: bool = False
    ) -> bytes:
        """DELETE: remove the object, or only mark it (deletionTimestamp) while finalizers remain."""
        coll, key, entry = self._existing(rt, namespace, name)
        old = decode(entry.raw)
        pre = (options or {}).get("preconditions") if isinstance(options, dict) else None
        if isinstance(pre, dict):
            self._check_preconditions(
                rt, name, entry, old, pre.get("resourceVersion"), pre.get("uid"), precondition=True
            )
        if self.admission.hooked and self.admission.has_hooks(rt.key):
            self.admission.validate(rt.key, "DELETE", old, None, False)
        meta = old["metadata"]
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return self._unchanged(coll, rt, old, "delete", "", dry_run)
            new = decode(entry.raw)
            nmeta = new["metadata"]
            nmeta["deletionTimestamp"] = self._clock.stamp()
            nmeta["deletionGracePeriodSeconds"] = 0
            if rt.tracks_generation:
                nmeta["generation"] = int(meta.get("generation") or 0) + 1
            return self._commit(coll, key, new, entry, "MODIFIED", "delete", "", dry_run)
        return self._commit(coll, key, old, entry, "DELETED", "delete", "", dry_run)

    # --- write helpers ----------------------------------------------------------------------------

    def _existing(self, rt: ResourceType, namespace: str, name: str) -> tuple[Collection, Key, Entry]:
        coll = self._collection(rt)
        key = self._key(rt, namespace, name)
        entry = coll.objects.get(key)
        if entry is None:
            raise errors.not_found(rt, name)
        return coll, key, entry

    @staticmethod
    def _check_type(rt: ResourceType, body: Obj) -> None:
        kind = body.get("kind")
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        api_version = body.get("apiVersion")
        group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
        if api_version and group != rt.group:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API version "
                f"({rt.api_version})"
            )

    @staticmethod
    def _check_meta(rt: ResourceType, name: str, meta: Obj) -> None:
        """The shapes the apiserver's decoder insists on: string maps and a list of strings."""
        for field in ("labels", "annotations"):
            value = meta.get(field)
            if value is not None and not (
                isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
            ):
                raise errors.bad_request(
                    f"{rt.kind} in version {rt.version!r} cannot be handled as a {rt.kind}: "
                    f"metadata.{field} must be a map of strings"
                )
        finalizers = meta.get("finalizers")
        if finalizers is not None and not (
            isinstance(finalizers, list) and all(isinstance(f, str) for f in finalizers)
        ):
            raise errors.bad_request(
                f"{rt.kind} in version {rt.version!r} cannot be handled as a {rt.kind}: "
                "metadata.finalizers must be a list of strings"
            )

    @staticmethod
    def _check_name(rt: ResourceType, name: Any) -> None:
        if not isinstance(name, str) or len(name) > 253 or not _NAME_RE.match(name):
            raise errors.invalid(
                rt,
                str(name),
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case '
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )

    @staticmethod
    def _check_preconditions(
        rt: ResourceType,
        name: str,
        entry: Entry,
        old: Obj,
        rv: Any,
        uid: Any,
        *,
        precondition: bool = False,
    ) -> None:
        current_uid = old["metadata"].get("uid")
        if uid and uid != current_uid:
            raise errors.conflict(
                rt,
                name,
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}",
            )
        if rv and str(rv) != str(entry.rv):
            if precondition:
                raise errors.conflict(
                    rt,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {rv}, "
                    f"ResourceVersion in object meta: {entry.rv}",
                )
            raise errors.conflict(rt, name, errors.STALE)

    def _apply_update(
        self,
        coll: Collection,
        rt: ResourceType,
        key: Key,
        entry: Entry,
        old: Obj,
        new: Obj,
        verb: str,
        subresource: str,
        dry_run: bool,
        patch_type: str = "",
        *,
        admit: bool = True,
    ) -> bytes:
        new = prune_nulls(new, rt.schema)
        old_meta = old["metadata"]
        meta = new.get("metadata")
        meta = dict(meta) if isinstance(meta, dict) else {}
        new["metadata"] = meta
        new["apiVersion"] = rt.api_version
        new["kind"] = rt.kind
        meta["name"] = old_meta["name"]
        if rt.namespaced:
            meta["namespace"] = old_meta["namespace"]
        for k in _SYSTEM_META:
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta["resourceVersion"] = old_meta.get("resourceVersion", "")
        meta.pop("selfLink", None)
        meta.pop("managedFields", None)
        self._check_meta(rt, key[1], meta)
        if old_meta.get("deletionTimestamp"):
            added = [f for f in meta.get("finalizers") or () if f not in (old_meta.get("finalizers") or ())]
            if added:
                raise errors.invalid(
                    rt,
                    key[1],
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {added}",
                )
        if rt.is_crd:
            self._check_crd(new)
            if subresource != "status":
                new["status"] = self._crd_status(new)
        status_write = subresource == "status"
        if admit and self.admission.hooked and self.admission.has_hooks(rt.key):
            new = self.admission.mutate(rt.key, "UPDATE", old, copy.deepcopy(new), status_write)
            self.admission.validate(rt.key, "UPDATE", old, new, status_write)
            meta = new["metadata"]  # the mutated copy's: a bump of the one before it would be lost
        if rt.tracks_generation and not status_write and _spec_changed(rt, old, new):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._commit(coll, key, new, entry, "DELETED", verb, subresource, dry_run, patch_type)
        if new == old:
            return self._unchanged(coll, rt, old, verb, subresource, dry_run, patch_type)
        return self._commit(coll, key, new, entry, "MODIFIED", verb, subresource, dry_run, patch_type)

    def _unchanged(
        self,
        coll: Collection,
        rt: ResourceType,
        obj: Obj,
        verb: str,
        subresource: str,
        dry_run: bool,
        patch_type: str = "",
    ) -> bytes:
        self.write_log.add(
            WriteRecord(
                verb=verb,
                group=rt.group,
                plural=rt.plural,
                kind=rt.kind,
                namespace=obj["metadata"].get("namespace", ""),
                name=obj["metadata"]["name"],
                resource_version=None if dry_run else int(obj["metadata"]["resourceVersion"]),
                dry_run=dry_run,
                subresource=subresource,
                changed=False,
                at=self._now(),
                patch_type=patch_type,
            )
        )
        return encode(obj)

    def _commit(
        self,
        coll: Collection,
        key: Key,
        obj: Obj,
        prev: Entry | None,
        etype: EventType,
        verb: str,
        subresource: str,
        dry_run: bool,
        patch_type: str = "",
    ) -> bytes:
        rt = coll.rt
        rv: int | None = None
        if dry_run:
            raw = encode(obj)
        else:
            self.rv += 1
            rv = self.rv
            meta = obj["metadata"]
            meta["resourceVersion"] = str(rv)
            raw = encode(obj)
            labels = meta.get("labels") or None
            if etype == "DELETED":
                del coll.objects[key]
                coll._sorted = None
            else:
                if prev is None:
                    coll._sorted = None
                coll.objects[key] = Entry(raw, labels, rv)
            coll.history.append(
                Change(
                    rv,
                    etype,
                    key[0],
                    key[1],
                    raw,
                    labels,
                    prev.raw if prev is not None else None,
                    prev.labels if prev is not None else None,
                )
            )
            if rt.is_crd:
                self._sync_crd(
                    decode(prev.raw) if prev is not None else None, None if etype == "DELETED" else obj
                )
        self.write_log.add(
            WriteRecord(
                verb=verb,
                group=rt.group,
                plural=rt.plural,
                kind=rt.kind,
                namespace=key[0],
                name=key[1],
                resource_version=rv,
                dry_run=dry_run,
                subresource=subresource,
                changed=not dry_run,
                at=self._now(),
                patch_type=patch_type,
            )
        )
        return raw

    @staticmethod
    def _crd_status(crd: Obj) -> Obj:
        spec = crd.get("spec") or {}
        return {
            "acceptedNames": spec.get("names") or {},
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                },
            ],
            "storedVersions": [v["name"] for v in spec.get("versions") or () if v.get("storage")],
        }

    # --- bulk and maintenance ---------------------------------------------------------------------

    def load(self, rt: ResourceType, objects: Iterable[Obj]) -> int:
        """Create or replace objects as given, status included, without admission (seeding, benchmarks)."""
        count = 0
        for obj in objects:
            meta = _meta(obj)
            namespace = meta.get("namespace", "") if rt.namespaced else ""
            existing = self._collection(rt).objects.get((namespace, meta.get("name", "")))
            if existing is None:
                self.create(rt, namespace, obj, trusted=True)
            else:
                coll, key, entry = self._existing(rt, namespace, meta["name"])
                old = decode(entry.raw)
                self._apply_update(coll, rt, key, entry, old, dict(obj), "update", "", False, admit=False)
            count += 1
        return count

    def compact(self) -> int:
        """Forget all history (what an etcd compaction does to watch caches); returns the compacted rv."""
        for coll in self.collections.values():
            coll.history.compact(self.rv)
        return self.rv
