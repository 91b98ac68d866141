"""A cluster snapshot (a Kubernetes `List`, or one object) read into slim objects, kind by kind.

`corral plan` reads what an operator exported (`kubectl get … -o json`, a support bundle) rather
than what the watcher decoded, so it meets the same messy objects the watcher does. The rule is
the watcher's too: one object that does not decode is set aside with the decoder's message
(`Undecodable`) and everything else is read; the caller decides whether to warn or to refuse.

What is refused outright is a document corral cannot read as a whole: not a List, or Longhorn
objects of another API version than the one corral models (`longhorn.io/v1beta1`, the storage
version of Longhorn 1.2 and older, has other shapes, conditions as maps among them; converting it
would be guessing, so the error names the apiVersion and says how to export v1beta2 instead).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from corral_model.kinds import KINDS, KindInfo


class SnapshotError(ValueError):
    """The document is not a Kubernetes List (or a single object) that corral can read."""


class Undecodable(msgspec.Struct, frozen=True, kw_only=True):
    """An object of a kind corral models that does not fit its slim Struct."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    token: str = ""  # the kind's bus token
    reason: str

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name or "?"
        at = f" at resourceVersion {self.resource_version}" if self.resource_version else ""
        return f"{self.kind} {where}{at} does not decode: {self.reason}"


class SnapshotItems(msgspec.Struct, kw_only=True):
    """The objects of a snapshot that corral models: decoded, or set aside."""

    objects: list[tuple[KindInfo, Any]] = msgspec.field(default_factory=list)
    undecodable: list[Undecodable] = msgspec.field(default_factory=list)


def _kind_info(item: Mapping[str, Any]) -> KindInfo | None:
    """The modelled kind of `item` (None for a kind corral does not read). Raises SnapshotError for
    a modelled kind in an API version corral does not read."""
    kind = item.get("kind")
    if not isinstance(kind, str):
        raise SnapshotError(f"an item has no kind: {str(item)[:120]}")
    api_version = item.get("apiVersion")
    if not isinstance(api_version, str):
        api_version = ""
    group, _, version = api_version.rpartition("/") if "/" in api_version else ("", "", api_version)
    for info in KINDS.values():
        if info.kind != kind or (api_version and info.group != group):
            continue
        if api_version and version != info.version:
            meta = item.get("metadata")
            name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
            raise SnapshotError(
                f"{kind} {name} has apiVersion {api_version}; corral reads {info.api_version} only. "
                f"Export the objects as {info.api_version} (Longhorn 1.3 and later serve it: "
                f"`kubectl get {info.plural}.{info.version}.{info.group} -o json`)."
            )
        return info
    return None


def items_of(document: Mapping[str, Any]) -> Sequence[Any]:
    """The items of a List, or the document itself when it is one object."""
    is_list = str(document.get("kind", "List")).endswith("List")
    items = document.get("items", []) if is_list else [document]
    if items is None:
        return []
    if not isinstance(items, list):
        raise SnapshotError("`items` is not a list")
    return items


def read_items(document: Mapping[str, Any]) -> SnapshotItems:
    """Every object of a kind corral models, decoded into its slim Struct or set aside."""
    read = SnapshotItems()
    for item in items_of(document):
        if not isinstance(item, Mapping):
            raise SnapshotError(f"an item is not an object: {str(item)[:120]}")
        info = _kind_info(item)
        if info is None:
            continue
        try:
            read.objects.append((info, msgspec.convert(item, info.struct)))
        except msgspec.ValidationError as e:
            meta = item.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}
            read.undecodable.append(
                Undecodable(
                    kind=info.kind,
                    token=info.token,
                    namespace=_text(meta.get("namespace")),
                    name=_text(meta.get("name")),
                    uid=_text(meta.get("uid")),
                    resource_version=_text(meta.get("resourceVersion")),
                    reason=str(e),
                )
            )
    return read


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
