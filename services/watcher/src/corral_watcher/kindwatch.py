"""The list-then-watch loop of one kind: every change on the bus, once, in order.

    list ──► publish the difference to what was last published, then RESYNCED
      │
      └─► watch from the list's resourceVersion (bookmarks on); on each event publish it and
          remember its resourceVersion; when a watch ends, stalls or fails, resume from the
          remembered version; on 410 Gone, or when the resync period is over, list again.

A watch can also die silently (a proxy holding a dead connection), which the inactivity timeout
catches; and the periodic re-list is the last line of defence against any event lost in between,
because the list is compared with what was published, not with what the watch said.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from typing import Any

import aiohttp
import msgspec
import nats.errors
from kubernetes_asyncio.client import ApiClient
from opentelemetry.trace import Tracer

from corral_bus import Bus
from corral_bus.cancellation import raise_if_cancelled
from corral_kube.decoding import Bookmark, StreamItem, UndecodableLine, WatchEvent, kind_decoder
from corral_kube.errors import KubeApiError, ResourceVersionGone, WatchStalled
from corral_kube.listing import list_objects
from corral_kube.watching import watch_batches
from corral_model.envelopes import EventType
from corral_model.kinds import KindInfo
from corral_watcher.bootstrap import last_published
from corral_watcher.events import EventEncoder, Message
from corral_watcher.metrics import KindMetrics, WatcherMetrics
from corral_watcher.publishing import OrderedPublisher
from corral_watcher.tracing import ChangeSpans
from corral_watcher.unreadable import Unreadable, UnreadableObjects
from corral_watcher.view import PublishedView

log = logging.getLogger("corral.watcher")

_WATCH_TYPES = {"ADDED": EventType.ADDED, "MODIFIED": EventType.MODIFIED, "DELETED": EventType.DELETED}

# What a failed list or watch raises that is worth retrying (anything else is a bug: let it surface).
RETRYABLE = (
    KubeApiError,
    WatchStalled,
    aiohttp.ClientError,
    OSError,
    TimeoutError,
    msgspec.DecodeError,
    msgspec.ValidationError,
)


class WatchSettings(msgspec.Struct, frozen=True, kw_only=True):
    namespace: str
    resync_period: float = 600.0
    inactivity_timeout: float = 90.0
    watch_timeout: int = 300
    """timeoutSeconds asked of the server for one watch (it ends the watch cleanly then)."""
    page_size: int = 500
    list_timeout: float = 120.0
    tombstone_ttl: float = 24 * 3600.0
    bootstrap_timeout: float = 30.0
    backoff_initial: float = 0.1
    backoff_max: float = 10.0
    guard_grace: float = 2.0
    """How long a stored state ahead of the watcher's may stay before it is challenged (guard.py)."""


class _Backoff:
    """Exponential with full jitter; reset by a success."""

    def __init__(self, initial: float, maximum: float) -> None:
        self._initial = initial
        self._max = maximum
        self._attempt = 0

    def reset(self) -> None:
        self._attempt = 0

    async def wait(self) -> None:
        delay = min(self._max, self._initial * 2**self._attempt)
        self._attempt += 1
        await asyncio.sleep(random.uniform(delay / 2, delay))


class KindWatcher:
    """Keeps LH_OBJECTS in step with the API server for one kind."""

    def __init__(
        self,
        api: ApiClient,
        kind: KindInfo,
        settings: WatchSettings,
        publisher: OrderedPublisher,
        metrics: WatcherMetrics,
        bus: Bus | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        """`bus`: read what was already published there before the first list (see bootstrap).
        `tracer`: a span per watched change, the root of its decision's trace (tracing.py)."""
        self.api = api
        self._bus = bus
        self.kind = kind
        self.settings = settings
        self.namespace = settings.namespace if kind.namespaced else ""
        self.publisher = publisher
        self.metrics = KindMetrics(metrics, kind.token)
        self.decoder = kind_decoder(kind.struct)
        self.encoder = EventEncoder(kind.token, settings.tombstone_ttl)
        self.view = PublishedView()
        self.unreadable = UnreadableObjects(kind, self.namespace, publisher.bus, self.encoder, self.metrics)
        self.resource_version = ""
        self.lists = 0
        """Completed (re)lists; `synced` is set after the first."""
        self.synced = asyncio.Event()
        self._backoff = _Backoff(settings.backoff_initial, settings.backoff_max)
        self.spans = ChangeSpans(tracer, kind.token) if tracer is not None else None

    async def run(self) -> None:
        """List and watch until cancelled."""
        if self._bus is not None:
            await self.bootstrap(self._bus)
        reason = "initial"
        while True:
            try:
                await self.relist(reason)
            except RETRYABLE as e:
                log.warning("listing %s failed: %s: %s", self.kind.token, type(e).__name__, e)
                reason = "error"
                await self._backoff.wait()
                continue
            self._backoff.reset()
            reason = await self.follow()

    async def bootstrap(self, bus: Bus) -> None:
        """Start from what LH_OBJECTS holds, so the first list publishes only what changed."""
        sequences: dict[str, int] = {}
        try:
            async with asyncio.timeout(self.settings.bootstrap_timeout):
                self.view.objects = await last_published(bus, self.kind, self.namespace, sequences)
        except (TimeoutError, OSError, RuntimeError, nats.errors.Error) as e:
            # Not fatal: the first list then republishes everything (deduplicated by id), and only
            # tombstones for objects deleted while no watcher ran can be missed.
            log.warning(
                "bootstrap of %s from LH_OBJECTS failed: %s: %s", self.kind.token, type(e).__name__, e
            )
            return
        for subject, seq in sequences.items():
            self.publisher.learn(subject, seq)
        log.info("%s: %d objects already on the bus", self.kind.token, len(self.view))

    async def relist(self, reason: str) -> None:
        """List the kind, publish what changed since the last publish, then the RESYNCED marker."""
        self.metrics.relist(reason)
        listed = await list_objects(
            self.api,
            self.kind,
            self.namespace,
            self.decoder,
            page_size=self.settings.page_size,
            request_timeout=self.settings.list_timeout,
        )
        unreadable = self.unreadable
        bad = [Unreadable.listed(rejected) for rejected in listed.rejected]
        named = {item.name: item for item in bad if item.name}
        changes = self.view.resync(
            listed.items, named, {name: unreadable.placeholder(item) for name, item in named.items()}
        )
        observed = time.time()
        encode = self.encoder.object_message
        messages: list[Message] = []
        for item in bad:
            marker = unreadable.report(item, observed)
            if marker is not None:
                messages.append(marker)
        for name in [name for name in unreadable.current if name not in named]:
            unreadable.readable(name)  # decodes again, or is gone (then a tombstone is below)
        for change in changes:
            if change.type is EventType.DELETED:
                # The deletion happened at some version up to the list's: the tombstone carries the
                # list's, so it sorts after every earlier event of the object and before any later.
                messages.append(encode(EventType.DELETED, change.object, observed, listed.resource_version))
            else:
                messages.append(encode(change.type, change.object, observed))
        messages.append(self.encoder.resynced_message(self.namespace, listed.resource_version))
        # One batch: a first list of 100 000 objects goes out pipelined, not one flush per object.
        await self.publisher.publish_batch(messages)
        if unreadable.queued:
            await unreadable.flush()
        for type_, counter in (
            (EventType.ADDED, self.metrics.added),
            (EventType.MODIFIED, self.metrics.modified),
            (EventType.DELETED, self.metrics.deleted),
        ):
            counter.inc(sum(1 for c in changes if c.type is type_))
        self.metrics.resynced.inc()
        self.metrics.objects.set(len(self.view))
        self.resource_version = listed.resource_version
        self.lists += 1
        self.synced.set()
        log.info(
            "%s listed at %s: %d objects, %d changes (%s)",
            self.kind.token,
            listed.resource_version,
            len(listed.items),
            len(changes),
            reason,
        )

    async def follow(self) -> str:
        """Watch from the last resourceVersion until a re-list is due; returns why it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.resync_period
        while True:
            # A cancel that landed as a watch read completed is dropped by Python 3.11's wait_for
            # (corral_bus.cancellation): honour it here, or a stopped watcher watches on.
            raise_if_cancelled()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return "resync"
            delivered = False
            try:
                batches = watch_batches(
                    self.api,
                    self.kind,
                    self.namespace,
                    self.resource_version,
                    self.decoder,
                    inactivity_timeout=self.settings.inactivity_timeout,
                    server_timeout=max(1, min(self.settings.watch_timeout, math.ceil(remaining))),
                )
                async with contextlib.aclosing(batches):
                    async for batch in batches:
                        delivered = True
                        await self.handle(batch)
                        raise_if_cancelled()
                self.metrics.watch_restart("closed")
                self._backoff.reset()
            except ResourceVersionGone as e:
                self.metrics.gone.inc()
                log.info(
                    "%s watch from %s: 410 Gone (%s); re-listing", self.kind.token, self.resource_version, e
                )
                return "gone"
            except RETRYABLE as e:
                self.metrics.watch_restart("stalled" if isinstance(e, WatchStalled) else "error")
                log.warning(
                    "%s watch from %s failed: %s: %s",
                    self.kind.token,
                    self.resource_version,
                    type(e).__name__,
                    e,
                )
                await self._backoff.wait()
                continue
            if not delivered:
                # A watch that closes at once, again and again, must not spin.
                await self._backoff.wait()

    async def handle(self, batch: list[StreamItem]) -> None:
        """Publish one batch of watch items, remembering the newest resourceVersion."""
        observed = time.time()
        encode = self.encoder.object_message
        apply = self.view.apply
        unreadable = self.unreadable
        unreadable_now = unreadable.current  # a dict: its test costs nothing while it is empty
        spans = self.spans
        messages: list[Message] = []
        added = modified = deleted = 0
        for item in batch:
            if type(item) is WatchEvent:
                event_type = _WATCH_TYPES.get(item.type)
                if event_type is None:
                    self._undecodable(f"unknown watch event type {item.type!r}")
                    continue
                obj = item.object
                if unreadable_now and obj.metadata.name in unreadable_now:
                    unreadable.readable(obj.metadata.name)
                apply(event_type, obj)
                if spans is None:
                    messages.append(encode(event_type, obj, observed))
                else:
                    messages.append(
                        spans.traced(encode(event_type, obj, observed), event_type, obj.metadata, observed)
                    )
                if event_type is EventType.MODIFIED:
                    modified += 1
                elif event_type is EventType.ADDED:
                    added += 1
                else:
                    deleted += 1
                self.resource_version = obj.metadata.resource_version
            elif type(item) is Bookmark:
                if item.resource_version:
                    self.resource_version = item.resource_version
            elif type(item) is UndecodableLine:
                message = self._unreadable_line(Unreadable.watched(item), observed)
                if message is not None:
                    messages.append(message)
                    if item.type == "DELETED":
                        deleted += 1
            else:
                self._undecodable(f"{getattr(item, 'error', item)}")
        if unreadable.queued:
            await unreadable.flush()
        if messages:
            # Latency is observed once per batch, on its last event.
            try:
                await self.publisher.publish_batch(messages, self._on_batch_acked(observed))
            finally:
                if spans is not None:
                    spans.end_all()
            if added:
                self.metrics.added.inc(added)
            if modified:
                self.metrics.modified.inc(modified)
            if deleted:
                self.metrics.deleted.inc(deleted)
            self.metrics.objects.set(len(self.view))

    def _on_batch_acked(self, observed: float) -> Any:
        def acked(sent_at: float) -> None:
            self.metrics.publish_latency.observe(time.monotonic() - sent_at)
            self.metrics.lag.observe(max(0.0, time.time() - observed))

        return acked

    def _unreadable_line(self, item: Unreadable, observed: float) -> Message | None:
        """What to publish for a watch line whose object does not decode.

        DELETED: the tombstone, carrying the last state published (or a placeholder with the
        line's metadata), since the object is gone whatever it held. Otherwise: the object is
        parked in LH_DEAD and announced UNREADABLE; the view keeps what was last published for
        it, or a placeholder, so that its deletion later yields a tombstone."""
        if item.resource_version:
            self.resource_version = item.resource_version  # handled: a resumed watch skips it
        if not item.name:
            return self.unreadable.report(item, observed)  # LH_DEAD only: it has no subject
        if item.watch_type == "DELETED":
            obj = self.view.objects.get(item.name) or self.unreadable.placeholder(item)
            self.view.apply(EventType.DELETED, obj)
            self.unreadable.readable(item.name)
            return self.encoder.object_message(
                EventType.DELETED, obj, observed, item.resource_version or None
            )
        if item.name not in self.view.objects:
            self.view.apply(EventType.ADDED, self.unreadable.placeholder(item))
        return self.unreadable.report(item, observed)

    def _undecodable(self, error: str) -> None:
        self.metrics.undecodable.inc()
        log.error("%s: skipped an object that does not decode: %s", self.kind.token, error[:500])
