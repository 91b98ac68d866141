"""Reading the gate's inputs from a file: what `kubectl get settings,engineimages -o json|yaml` prints.

The file is a Kubernetes `List` (or a `SettingList` / `EngineImageList`, or one object) whose items
carry `kind`; Settings and EngineImages are decoded into the slim structs, anything else is skipped.
A snapshot taken across namespaces is narrowed to the requested one, and a snapshot that has
objects only in *other* namespaces is an error: silently finding no version setting would read as a
fresh install and let any upgrade through.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import msgspec

from corral_model.longhorn import EngineImage, Setting
from corral_upgradepath.cluster import ClusterView, cluster_view

_KINDS: dict[str, type[Setting] | type[EngineImage]] = {"Setting": Setting, "EngineImage": EngineImage}


class SnapshotError(ValueError):
    """The snapshot cannot be read or is not a list of Kubernetes objects."""


def _timestamps_as_text(value: Any) -> Any:
    """YAML reads an unquoted `creationTimestamp: 2026-10-01T10:00:00Z` as a datetime; the API
    (and the slim structs) carry it as RFC 3339 text, so hand-written snapshots are normalised."""
    if isinstance(value, dict):
        return {k: _timestamps_as_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_timestamps_as_text(v) for v in value]
    if isinstance(value, datetime.datetime):
        text = value.isoformat()
        return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _decode_document(data: bytes) -> Any:
    if data.lstrip()[:1] in (b"{", b"["):
        return msgspec.json.decode(data)
    return _timestamps_as_text(msgspec.yaml.decode(data))


def _items(document: Any) -> list[tuple[str, dict[str, Any]]]:
    """(kind, object) pairs; list items may leave `kind` to the list's own kind (`SettingList`)."""
    if not isinstance(document, dict):
        raise SnapshotError(f"expected a Kubernetes object or List, got {type(document).__name__}")
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        raise SnapshotError("the document has no `kind`")
    if not kind.endswith("List"):
        return [(kind, document)]
    items = document.get("items")
    if items is None:
        return []
    if not isinstance(items, list):
        raise SnapshotError("`items` is not a list")
    default_kind = kind.removesuffix("List")
    pairs: list[tuple[str, dict[str, Any]]] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise SnapshotError(f"items[{index}] is not an object")
        item_kind = item.get("kind", default_kind)
        pairs.append((item_kind if isinstance(item_kind, str) else "", item))
    return pairs


def parse_snapshot(data: bytes, *, namespace: str = "longhorn-system") -> ClusterView:
    try:
        pairs = _items(_decode_document(data))
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SnapshotError(f"not JSON or YAML: {e}") from e
    objects: list[tuple[str, Setting | EngineImage]] = []
    for index, (kind, raw) in enumerate(pairs):
        struct = _KINDS.get(kind)
        if struct is None:
            continue
        try:
            objects.append((kind, msgspec.convert(raw, struct)))
        except msgspec.ValidationError as e:
            meta = raw.get("metadata")
            name = meta.get("name", "?") if isinstance(meta, dict) else "?"
            raise SnapshotError(f"item {index} ({kind} {name}): {e}") from e
    in_namespace = [(k, o) for k, o in objects if o.metadata.namespace in ("", namespace)]
    if objects and not in_namespace:
        found = ", ".join(sorted({o.metadata.namespace for _, o in objects}))
        raise SnapshotError(
            f"no Setting or EngineImage in namespace {namespace!r} (found namespaces: {found})"
        )
    return cluster_view(
        (o for k, o in in_namespace if isinstance(o, Setting)),
        (o for k, o in in_namespace if isinstance(o, EngineImage)),
    )


def read_snapshot(path: str | Path, *, namespace: str = "longhorn-system") -> ClusterView:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise SnapshotError(f"cannot read snapshot {path}: {e.strerror or e}") from e
    try:
        return parse_snapshot(data, namespace=namespace)
    except SnapshotError as e:
        raise SnapshotError(f"snapshot {path}: {e}") from e
