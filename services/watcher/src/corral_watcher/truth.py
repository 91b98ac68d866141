"""Asking the API server whether a state stored on LH_OBJECTS can be real.

The watcher's NATS credentials let anyone holding them store any event, with any resourceVersion.
When the stream claims a newer state of an object than the one the watcher is publishing, only the
API server can say whether that state ever existed: its answer is the newest resourceVersion it
vouches for concerning the object, the object's own (one list filtered to its name, so a deleted
object needs no second request: the list's own resourceVersion is then the answer). What the
stream claims beyond that is contradicted (corral_watcher.conflicts.overrule): reported here, a log
line naming the subject and a counter per kind, and replaced by the publisher.

Asked only on a conflict whose stored state looks newer than ours, so it costs nothing per event.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import msgspec
from kubernetes_asyncio.client import ApiClient

from corral_kube.decoding import decode_status
from corral_kube.errors import KubeApiError
from corral_kube.listing import get_raw
from corral_model.kinds import KINDS
from corral_watcher.metrics import WatcherMetrics

log = logging.getLogger("corral.watcher.truth")


class Truth(Protocol):
    """What the publisher asks when the stream claims a newer state than the watcher's."""

    async def newest(self, payload: bytes) -> int:
        """The newest resourceVersion the API server vouches for concerning the object of our event
        `payload` (raises when it cannot be asked: the conflict is then tried again later)."""
        ...

    def contradicted(self, subject: str, payload: bytes, stored: int | None, truth: int) -> None:
        """Report a stored message (at resourceVersion `stored`) that the API server contradicts."""
        ...


class _Identity(msgspec.Struct):
    kind: str
    namespace: str = ""
    name: str = ""


class _Meta(msgspec.Struct, rename="camel"):
    resource_version: str = ""


class _Item(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _List(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    items: list[_Item] | None = None


_identity = msgspec.json.Decoder(_Identity)
_list = msgspec.json.Decoder(_List)


def _version(text: str) -> int:
    if not text.isdigit():
        raise KubeApiError(500, "BadResourceVersion", f"not a resourceVersion: {text!r}")
    return int(text)


class ApiTruth:
    """`Truth` from the API server the watcher lists and watches."""

    def __init__(self, api: ApiClient, metrics: WatcherMetrics, *, request_timeout: float = 10.0) -> None:
        self._api = api
        self._metrics = metrics
        self._timeout = request_timeout

    async def newest(self, payload: bytes) -> int:
        who = _identity.decode(payload)  # our own event: its kind and name are the API server's
        kind = KINDS[who.kind]
        query: list[tuple[str, Any]] = [("limit", 1)]
        if who.name:  # a RESYNCED marker has none: the list's version is the answer
            query.append(("fieldSelector", f"metadata.name={who.name}"))
        status, body = await get_raw(
            self._api, kind.path(who.namespace), query, request_timeout=self._timeout
        )
        if not 200 <= status < 300:
            error = decode_status(body)
            raise KubeApiError(status, error.reason, error.message)
        listed = _list.decode(body)
        if who.name and listed.items:
            return _version(listed.items[0].metadata.resource_version)
        return _version(listed.metadata.resource_version)

    def contradicted(self, subject: str, payload: bytes, stored: int | None, truth: int) -> None:
        kind = _identity.decode(payload).kind
        self._metrics.contradicted.labels(kind).inc()
        log.warning(
            "%s: LH_OBJECTS held a state at resourceVersion %s, but the API server's newest for it is %d:"
            " not a state the API server ever had; replaced by the API server's object",
            subject,
            stored,
            truth,
        )
