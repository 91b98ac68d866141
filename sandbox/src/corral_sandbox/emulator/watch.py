"""Serving one watch: replay from a resourceVersion, then follow, as kube-apiserver's watch cache does.

The stream is chunked JSON lines (`{"type":…,"object":…}`). Events are written in large chunks built
by joining the stored object bytes between a fixed prefix and suffix, so one write carries every event
that accumulated since the last one and nothing is re-encoded. Selector watches turn transitions into
the events the apiserver sends: an object that starts matching arrives as ADDED, one that stops
matching as DELETED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from corral_sandbox.emulator import errors
from corral_sandbox.emulator.faults import Faults
from corral_sandbox.emulator.history import Change
from corral_sandbox.emulator.http import Connection, Reply
from corral_sandbox.emulator.resources import ResourceType
from corral_sandbox.emulator.selectors import FieldSelector, LabelSelector
from corral_sandbox.emulator.store import Collection, Store, decode

_PREFIX = {
    "ADDED": b'{"type":"ADDED","object":',
    "MODIFIED": b'{"type":"MODIFIED","object":',
    "DELETED": b'{"type":"DELETED","object":',
}
_SUFFIX = b"}\n"
_BATCH = 2048  # changes taken from the history per write
_LIVENESS_S = 5.0  # how often an idle watch checks that its client is still there


@dataclass
class WatchRequest:
    rt: ResourceType
    namespace: str | None
    labels: LabelSelector | None
    fields: FieldSelector | None
    resource_version: str  # "" or "0": start with the current state as ADDED events
    send_initial_events: bool | None
    bookmarks: bool
    timeout_s: float | None


class WatchState:
    """What every watch of one emulator shares: the shutdown flag and the bookmark cadence."""

    def __init__(self, faults: Faults, bookmark_interval_s: float, first_bookmark_s: float) -> None:
        self.faults = faults
        self.bookmark_interval_s = bookmark_interval_s
        self.first_bookmark_s = first_bookmark_s
        self.stopping = False
        self.active = 0
        self.events_sent = 0


def _matches(
    req: WatchRequest, namespace: str, name: str, labels: Mapping[str, str] | None, raw: bytes | None
) -> bool:
    if req.labels is not None and not req.labels.matches(labels):
        return False
    if req.fields is not None:
        if not req.fields.matches_key(namespace, name):
            return False
        if req.fields.needs_object and (raw is None or not req.fields.matches_object(decode(raw))):
            return False
    return True


def _events(req: WatchRequest, changes: list[Change]) -> list[tuple[bytes, bytes]]:
    """(prefix, object bytes) for each change this watch should see, selector transitions applied."""
    out: list[tuple[bytes, bytes]] = []
    ns = req.namespace
    plain = req.labels is None and req.fields is None
    for c in changes:
        if ns is not None and c.namespace != ns:
            continue
        if plain:
            out.append((_PREFIX[c.type], c.raw))
            continue
        now = _matches(req, c.namespace, c.name, c.labels, c.raw)
        if c.type != "MODIFIED":
            if now:
                out.append((_PREFIX[c.type], c.raw))
            continue
        before = _matches(req, c.namespace, c.name, c.prev_labels, c.prev_raw)
        if now:
            out.append((_PREFIX["MODIFIED" if before else "ADDED"], c.raw))
        elif before:
            out.append((_PREFIX["DELETED"], c.raw))
    return out


def _join(events: list[tuple[bytes, bytes]]) -> bytes:
    parts: list[bytes] = []
    for prefix, raw in events:
        parts.append(prefix)
        parts.append(raw)
        parts.append(_SUFFIX)
    return b"".join(parts)


def _bookmark(rt: ResourceType, rv: int, initial_end: bool = False) -> bytes:
    meta: dict[str, object] = {"resourceVersion": str(rv)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
    return b'{"type":"BOOKMARK","object":' + msgspec.json.encode(obj) + _SUFFIX


def _error_event(err: errors.ApiError) -> bytes:
    return b'{"type":"ERROR","object":' + err.body() + _SUFFIX


class _Stream:
    """One open watch response; `send` honours the cut-after-N-events fault."""

    def __init__(self, conn: Connection, state: WatchState) -> None:
        self.conn = conn
        self.state = state
        self.sent = 0
        self.cut = False

    async def send(self, events: list[tuple[bytes, bytes]]) -> None:
        limit = self.state.faults.watch_cut_after_events
        if limit is not None and self.sent + len(events) >= limit:
            events = events[: max(0, limit - self.sent)]
            self.cut = True
        if events:
            await self.conn.write(_join(events))
            self.sent += len(events)
            self.state.events_sent += len(events)

    async def write(self, data: bytes) -> None:
        await self.conn.write(data)


async def serve(conn: Connection, store: Store, state: WatchState, req: WatchRequest) -> Reply | None:
    """Stream the watch on `conn`; refusals found before the stream starts come back as ApiError."""
    coll = store.collections.get(req.rt.key)
    if coll is None:
        raise errors.page_not_found(req.rt.qualified)
    initial = (
        req.resource_version in ("", "0") if req.send_initial_events is None else req.send_initial_events
    )
    start_rv: int | None = None
    if req.resource_version not in ("", "0"):
        try:
            start_rv = int(req.resource_version)
        except ValueError:
            raise errors.bad_request(f'invalid resource version: "{req.resource_version}"') from None
    conn.start_stream(200, {"Cache-Control": "no-cache, private"})
    state.active += 1
    stream = _Stream(conn, state)
    try:
        await _run(conn, store, state, req, coll, initial, start_rv, stream)
        if stream.cut and state.faults.watch_drop_silently:
            await _hang(conn, state, req.timeout_s)
        if not state.stopping:
            conn.end_stream()
    except ConnectionError:
        pass
    finally:
        state.active -= 1
    return None


async def _run(
    conn: Connection,
    store: Store,
    state: WatchState,
    req: WatchRequest,
    coll: Collection,
    initial: bool,
    start_rv: int | None,
    stream: _Stream,
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    history = coll.history
    if initial:
        items, _, _, _ = store.select(req.rt, req.namespace, req.labels, req.fields)
        position = history.end
        snapshot_rv = store.rv
        for i in range(0, len(items), _BATCH):
            await stream.send([(_PREFIX["ADDED"], raw) for raw in items[i : i + _BATCH]])
            if stream.cut:
                return
        if req.send_initial_events and req.bookmarks:
            await stream.write(_bookmark(req.rt, snapshot_rv, initial_end=True))
    else:
        assert start_rv is not None
        found = history.position_after(start_rv)
        if found is None:
            await stream.write(_error_event(errors.expired(start_rv, history.expired_rv)))
            return
        position = found
    deadline = started + req.timeout_s if req.timeout_s else None
    next_bookmark = started + min(state.first_bookmark_s, state.bookmark_interval_s)
    while not state.stopping and not history.closed and not conn.closed:
        if position < history.start:
            # Fell out of the window while writing: the apiserver ends such a watch with 410.
            await stream.write(_error_event(errors.expired(start_rv or 0, history.expired_rv)))
            return
        if position < history.end:
            offset = position - history.start
            batch = history.changes[offset : offset + _BATCH]
            position += len(batch)
            events = _events(req, batch)
            if events:
                await stream.send(events)
                if stream.cut:
                    return
            continue
        now = loop.time()
        cut_after = state.faults.watch_cut_after_s
        if cut_after is not None and now >= started + cut_after:
            stream.cut = True
            return
        if deadline is not None and now >= deadline:
            return
        if req.bookmarks and now >= next_bookmark:
            await stream.write(_bookmark(req.rt, store.rv))
            next_bookmark = now + state.bookmark_interval_s
            continue
        wait = _LIVENESS_S
        if deadline is not None:
            wait = min(wait, deadline - now)
        if req.bookmarks:
            wait = min(wait, next_bookmark - now)
        if cut_after is not None:
            wait = min(wait, started + cut_after - now)
        await history.wait(wait)


async def _hang(conn: Connection, state: WatchState, timeout_s: float | None) -> None:
    """A silently dropped watch: the connection stays open but nothing more is ever sent (until the
    client's own timeoutSeconds, as a proxy that lost its upstream would behave)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s if timeout_s else None
    while not state.stopping and not conn.closed:
        if deadline is not None and loop.time() >= deadline:
            return
        await asyncio.sleep(0.2 if deadline is None else min(0.2, max(0.0, deadline - loop.time())))
