"""Watch one kind from a resourceVersion, yielding decoded batches of stream items.

One HTTP watch (`?watch=1&allowWatchBookmarks=true`) is read in raw chunks, not line by line: the
complete lines of each chunk are decoded in one msgspec call (see `decoding`), and the partial last
line waits for the next chunk. That keeps the per-event cost to the decoding itself.

The stream ends normally when the server's `timeoutSeconds` runs out; it fails with
`ResourceVersionGone` on a 410 (HTTP status, or an ERROR event, the way kube-apiserver reports a
compacted resourceVersion), with `KubeApiError` on any other error, and with `WatchStalled` when no
byte at all arrives for `inactivity_timeout` seconds: bookmarks keep a healthy watch talking, so
silence means a watch that died without closing its connection. Keeping the last resourceVersion and
deciding between resuming and re-listing is the caller's job (the watcher service).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio.client import ApiClient

from corral_kube.decoding import KindDecoder, StreamItem, WatchError, decode_status
from corral_kube.errors import KubeApiError, ResourceVersionGone, WatchStalled
from corral_kube.listing import AUTH_SETTINGS
from corral_model.kinds import KindInfo

K = TypeVar("K")


class LineSplitter:
    """Turns arbitrary byte chunks into runs of complete newline-terminated lines."""

    __slots__ = ("_partial",)

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> bytes:
        """The complete lines now available (possibly b""); the rest is kept for the next chunk."""
        data = self._partial + chunk if self._partial else chunk
        end = data.rfind(b"\n") + 1
        self._partial = data[end:]
        return data[:end]

    def flush(self) -> bytes:
        """What is left at the end of the stream (a last line without its newline)."""
        rest, self._partial = self._partial, b""
        return rest


def watch_query(resource_version: str, server_timeout: int) -> list[tuple[str, Any]]:
    return [
        ("watch", "true"),
        ("allowWatchBookmarks", "true"),
        ("resourceVersion", resource_version),
        ("timeoutSeconds", server_timeout),
    ]


async def watch_batches(
    api: ApiClient,
    kind: KindInfo,
    namespace: str,
    resource_version: str,
    decoder: KindDecoder[K],
    *,
    inactivity_timeout: float = 90.0,
    server_timeout: int = 300,
    connect_timeout: float = 10.0,
) -> AsyncGenerator[list[StreamItem], None]:
    """Yield the events after `resource_version`, a batch per network chunk, until the watch ends.

    Batches hold WatchEvent, Bookmark and UndecodableLine items in stream order; an ERROR item is
    never yielded but raised (after the items before it).
    """
    response = await api.call_api(
        kind.path(namespace),
        "GET",
        query_params=watch_query(resource_version, server_timeout),
        header_params={"Accept": "application/json"},
        auth_settings=AUTH_SETTINGS,
        _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(sock_connect=connect_timeout, connect=connect_timeout),
    )
    try:
        if not 200 <= response.status < 300:
            error = decode_status(await response.read())
            if response.status == 410:
                raise ResourceVersionGone(error.message)
            raise KubeApiError(response.status, error.reason, error.message)
        content = response.content
        splitter = LineSplitter()
        while True:
            try:
                chunk = await asyncio.wait_for(content.readany(), inactivity_timeout)
            except TimeoutError:
                raise WatchStalled(
                    f"no data on the {kind.token} watch for {inactivity_timeout:.0f}s"
                ) from None
            lines = splitter.feed(chunk) if chunk else splitter.flush()
            if lines:
                items = decoder.decode_lines(lines)
                error_at = _first_error(items)
                if error_at < 0:
                    yield items
                else:
                    if error_at:
                        yield items[:error_at]
                    raise _as_exception(items[error_at])  # type: ignore[arg-type]
            if not chunk:
                return
    finally:
        response.close()


def _first_error(items: list[StreamItem]) -> int:
    for i, item in enumerate(items):
        if type(item) is WatchError:
            return i
    return -1


def _as_exception(error: WatchError) -> KubeApiError:
    if error.gone:
        return ResourceVersionGone(error.message)
    return KubeApiError(error.code, error.reason, error.message)
