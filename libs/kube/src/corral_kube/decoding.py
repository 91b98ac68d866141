"""Decoding of raw list bodies and watch streams straight into corral's slim Structs.

kubernetes-asyncio's generated models cost about 160x more than msgspec on the same bytes, and keep
every field (managedFields included). Here a list body or a chunk of a watch stream is decoded in one
msgspec call into the slim Struct of the kind, so whatever the Struct does not declare is skipped
without ever becoming a Python object.

A watch stream is newline-delimited `{"type": ..., "object": ...}`. Nearly every line is an
ADDED/MODIFIED/DELETED of a full object, so a whole chunk is decoded at once with `decode_lines`
into typed `WatchEvent`s; the rare BOOKMARK (an object with only a resourceVersion) and ERROR (a
`Status`) lines do not fit the typed shape, so a chunk holding one is decoded again line by line,
with a loose fallback for those lines.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

K = TypeVar("K")

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
"""A copy of the whole object that `kubectl apply` leaves in an annotation: large, and never read."""


class WatchEvent(msgspec.Struct, Generic[K], frozen=True, gc=False):
    """One ADDED / MODIFIED / DELETED line of a watch stream."""

    type: str
    object: K


class Bookmark(msgspec.Struct, frozen=True, gc=False):
    """The server's promise that nothing of this kind changed up to `resource_version`."""

    resource_version: str


class WatchError(msgspec.Struct, frozen=True, gc=False):
    """An ERROR line: a Kubernetes `Status` (410 Gone when the resourceVersion was compacted away)."""

    code: int
    reason: str = ""
    message: str = ""

    @property
    def gone(self) -> bool:
        return self.code == 410 or self.reason == "Expired" or self.reason == "Gone"


class UndecodableLine(msgspec.Struct, frozen=True, gc=False):
    """A line that is neither a typed event, a bookmark nor an error: reported, never fatal."""

    line: bytes
    error: str
    name: str = ""
    """The object's name, when at least that could be read."""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    type: str = ""
    """The watch event's type (ADDED, MODIFIED, DELETED), when readable."""
    object: bytes = b""
    """The event's object as the API server sent it, when the line is JSON at all."""


class Rejected(msgspec.Struct, frozen=True, gc=False):
    """A listed object that does not fit its slim Struct (name "" when not even that was readable)."""

    name: str
    error: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    raw: bytes = b""
    """The object as the API server sent it (for the dead letter)."""


StreamItem = WatchEvent[Any] | Bookmark | WatchError | UndecodableLine


class _ListMeta(msgspec.Struct, rename="camel", gc=False):
    resource_version: str = ""
    continue_: str = msgspec.field(default="", name="continue")


class ObjectList(msgspec.Struct, Generic[K], gc=False):
    """A list response: the page's items and the collection's resourceVersion (and continue token)."""

    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[K] = msgspec.field(default_factory=list)
    rejected: list[Rejected] = msgspec.field(default_factory=list, name="corral:rejected")
    """Items left out because they do not decode (filled by KindDecoder.decode_list, never by JSON)."""

    @property
    def resource_version(self) -> str:
        return self.metadata.resource_version

    @property
    def continue_token(self) -> str:
        return self.metadata.continue_


class _LooseMeta(msgspec.Struct, rename="camel", gc=False):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""


class _RawList(msgspec.Struct, gc=False):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _NameOnly(msgspec.Struct, gc=False):
    metadata: _LooseMeta = msgspec.field(default_factory=_LooseMeta)


class _LooseObject(msgspec.Struct, rename="camel", gc=False):
    metadata: _LooseMeta = msgspec.field(default_factory=_LooseMeta)
    code: int = 0
    reason: str = ""
    message: str = ""


class _LooseEvent(msgspec.Struct, gc=False):
    type: str
    object: _LooseObject = msgspec.field(default_factory=_LooseObject)


class _RawEvent(msgspec.Struct, gc=False):
    object: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)


class Status(msgspec.Struct, gc=False):
    """The body of an API error response."""

    code: int = 0
    reason: str = ""
    message: str = ""


_loose = msgspec.json.Decoder(_LooseEvent)
_status = msgspec.json.Decoder(Status)
_raw_list = msgspec.json.Decoder(_RawList)
_name_only = msgspec.json.Decoder(_NameOnly)
_raw_event = msgspec.json.Decoder(_RawEvent)


def decode_status(body: bytes) -> Status:
    """An error body as a Status; a body that is not one (a proxy's HTML page) becomes its text."""
    try:
        return _status.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Status(message=body[:500].decode("utf-8", "replace"))


def _strip_last_applied(obj: Any) -> Any:
    """The object without the last-applied-configuration annotation.

    The Structs are frozen, but the annotations dict was created by this very decode and is not
    shared with anything yet, so removing the key in place is safe, and a tenth of the cost of
    rebuilding two Structs.
    """
    obj.metadata.annotations.pop(LAST_APPLIED, None)
    return obj


class KindDecoder(Generic[K]):
    """Decoders for one slim Struct type: list bodies and watch-stream chunks."""

    def __init__(self, struct: type[K]) -> None:
        self.struct = struct
        self._event: msgspec.json.Decoder[WatchEvent[K]] = msgspec.json.Decoder(WatchEvent[struct])  # type: ignore[valid-type]
        self._list: msgspec.json.Decoder[ObjectList[K]] = msgspec.json.Decoder(ObjectList[struct])  # type: ignore[valid-type]
        self._object: msgspec.json.Decoder[K] = msgspec.json.Decoder(struct)

    def decode_list(self, body: bytes) -> ObjectList[K]:
        """Decode one list response page; items that do not fit the Struct go to `rejected`.

        Raises msgspec.DecodeError/ValidationError only when the body is not a list at all.
        """
        try:
            page = self._list.decode(body)
        except msgspec.ValidationError:
            page = self._decode_list_item_by_item(body)
        items = page.items
        for item in items:
            if LAST_APPLIED in item.metadata.annotations:  # type: ignore[attr-defined]
                _strip_last_applied(item)
        return page

    def _decode_list_item_by_item(self, body: bytes) -> ObjectList[K]:
        raw = _raw_list.decode(body)
        page: ObjectList[K] = ObjectList(metadata=raw.metadata)
        for item in raw.items:
            try:
                page.items.append(self._object.decode(item))
            except (msgspec.ValidationError, msgspec.DecodeError) as e:
                meta = _meta_of(item)
                page.rejected.append(
                    Rejected(
                        name=meta.name,
                        error=str(e),
                        namespace=meta.namespace,
                        uid=meta.uid,
                        resource_version=meta.resource_version,
                        raw=bytes(item),
                    )
                )
        return page

    def decode_object(self, body: bytes) -> K:
        obj = self._object.decode(body)
        if LAST_APPLIED in obj.metadata.annotations:  # type: ignore[attr-defined]
            _strip_last_applied(obj)
        return obj

    def decode_lines(self, lines: bytes) -> list[StreamItem]:
        """Decode complete newline-terminated watch lines (one chunk) into stream items, in order."""
        try:
            events: list[StreamItem] = self._event.decode_lines(lines)  # type: ignore[assignment]
        except (msgspec.ValidationError, msgspec.DecodeError):
            return [self._decode_line(line) for line in lines.splitlines() if line.strip()]
        for event in events:
            if LAST_APPLIED in event.object.metadata.annotations:  # type: ignore[union-attr]
                _strip_last_applied(event.object)  # type: ignore[union-attr]
        return events

    def _decode_line(self, line: bytes) -> StreamItem:
        try:
            event = self._event.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError) as typed_error:
            return _decode_untyped(line, typed_error)
        if LAST_APPLIED in event.object.metadata.annotations:  # type: ignore[attr-defined]
            _strip_last_applied(event.object)
        return event


def _meta_of(raw: bytes | msgspec.Raw) -> _LooseMeta:
    """What can be read of an object's metadata (empty fields when not even that decodes)."""
    try:
        return _name_only.decode(raw).metadata
    except (msgspec.ValidationError, msgspec.DecodeError):
        return _LooseMeta()


def _decode_untyped(line: bytes, typed_error: Exception) -> StreamItem:
    try:
        loose = _loose.decode(line)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        return UndecodableLine(line=line, error=str(e))
    if loose.type == "BOOKMARK":
        return Bookmark(resource_version=loose.object.metadata.resource_version)
    if loose.type == "ERROR":
        obj = loose.object
        return WatchError(code=obj.code, reason=obj.reason, message=obj.message)
    meta = loose.object.metadata
    return UndecodableLine(
        line=line,
        error=f"{loose.type} event does not fit the slim object: {typed_error}",
        name=meta.name,
        namespace=meta.namespace,
        uid=meta.uid,
        resource_version=meta.resource_version,
        type=loose.type,
        object=bytes(_raw_event.decode(line).object),
    )


_decoders: dict[Any, KindDecoder[Any]] = {}


def kind_decoder(struct: type[K]) -> KindDecoder[K]:
    """The shared decoder for `struct` (building one compiles msgspec's type plan: do it once)."""
    decoder = _decoders.get(struct)
    if decoder is None:
        decoder = _decoders[struct] = KindDecoder(struct)
    return decoder
