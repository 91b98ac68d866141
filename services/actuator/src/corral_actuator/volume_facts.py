"""The volumes as the API server last told the actuator: what engine-upgrade's rules are judged on.

The actuator holds engine-upgrade's per-node limit and eligibility itself (engine_upgrade_guard.py).
Reading each volume before its upgrade doubled the requests of a wave (5 086 → 2 612 patches/s in
bench_actuator), so, like any Kubernetes controller, it keeps an informer: one list of the volumes,
then a watch from that list's resourceVersion (re-listed on 410 Gone, resumed after a dropped or
stalled watch). Per volume it keeps only what the rules read, and per owner node the names of the
volumes whose upgrade is in flight (spec.image ≠ status.currentImage), so counting a node is a
lookup, not a scan.

The cache is only ever a fast path. A write judged on it tests the resourceVersion it was judged
on, so a volume that changed since is refused by the API server (422) and judged again on a fresh
read; a refusal judged on it is confirmed on a fresh read before it is returned. A write the
actuator makes is recorded at once with the resourceVersion the server answered (`written`), and a
watch event older than that is ignored, so a lagging watch can never hide an upgrade in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import msgspec
from kubernetes_asyncio.client import ApiClient

from corral_actuator.classify import TransientApiError
from corral_bus.cancellation import cancel_and_wait, raise_if_cancelled
from corral_kube.decoding import Bookmark, StreamItem, WatchEvent, kind_decoder
from corral_kube.errors import ResourceVersionGone
from corral_kube.listing import list_objects
from corral_kube.watching import watch_batches
from corral_model import longhorn as lh
from corral_model.kinds import KINDS

log = logging.getLogger("corral.actuator.volumes")
_VOLUME = KINDS["volume"]


def _version(rv: str) -> int:
    """etcd's revision; -1 for a resourceVersion that is not a number (then never compared)."""
    return int(rv) if rv.isdigit() else -1


class VolumeInformer:
    """List + watch of the volumes of one namespace, started on first use."""

    def __init__(self, api: ApiClient, namespace: str, *, retry_s: float = 1.0) -> None:
        self._api = api
        self._namespace = namespace
        self._retry_s = retry_s
        self._volumes: dict[str, lh.Volume] = {}
        self._in_flight: dict[str, set[str]] = {}  # owner node -> volume names
        self._written: dict[str, int] = {}  # volume -> resourceVersion of the actuator's own write
        self._task: asyncio.Task[None] | None = None
        self.synced = asyncio.Event()
        self.listed = False
        """`synced` as a plain flag, for the questions asked on every engine upgrade."""
        self._failed = asyncio.Event()
        self._error = ""
        self._version = ""  # where the watch resumes; empty: list first
        self.relists = 0

    async def ready(self) -> None:
        """Start the informer if needed and wait for its first list. Raises TransientApiError when
        the list failed (the informer keeps trying; the command is tried again later)."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"volume-informer-{self._namespace}")
        if self.synced.is_set():
            return
        self._failed.clear()
        synced, failed = asyncio.ensure_future(self.synced.wait()), asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({synced, failed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
            failed.cancel()
        if not self.synced.is_set():
            raise TransientApiError(f"listing the volumes to judge engine upgrades on: {self._error}")

    async def close(self) -> None:
        await cancel_and_wait(self._task)

    def get(self, name: str) -> lh.Volume | None:
        return self._volumes.get(name)

    def in_flight(self, owner: str) -> set[str]:
        return self._in_flight.get(owner, set())

    def observe(self, volume: lh.Volume) -> None:
        """A volume as read or listed (the newest wins)."""
        name = volume.metadata.name
        written = self._written.get(name)
        if written is not None:
            if 0 <= _version(volume.metadata.resource_version) < written:
                return  # older than our own write: the watch is behind
            del self._written[name]
        # _forget and setdefault written out: twice for every upgrade written (our own record of
        # it, then the watch's), so no call and no empty set is spent on the common case.
        old = self._volumes.get(name)
        if old is not None:
            counted = self._in_flight.get(old.status.owner_id)
            if counted is not None:
                counted.discard(name)
        self._volumes[name] = volume
        if volume.spec.image != volume.status.current_image:
            owner = volume.status.owner_id
            counted = self._in_flight.get(owner)
            if counted is None:
                counted = self._in_flight[owner] = set()
            counted.add(name)

    def written(self, volume: lh.Volume, image: str, resource_version: str) -> None:
        """The actuator set `volume`'s spec.image to `image`, answered at `resource_version`."""
        spec = msgspec.structs.replace(volume.spec, image=image)
        meta = msgspec.structs.replace(volume.metadata, resource_version=resource_version)
        self._written.pop(volume.metadata.name, None)
        self.observe(msgspec.structs.replace(volume, spec=spec, metadata=meta))
        self._written[volume.metadata.name] = _version(resource_version)

    def _forget(self, name: str) -> None:
        old = self._volumes.pop(name, None)
        if old is not None:
            self._in_flight.get(old.status.owner_id, set()).discard(name)

    def _apply(self, batch: list[StreamItem]) -> None:
        for item in batch:
            if isinstance(item, WatchEvent):
                volume = item.object
                self._version = volume.metadata.resource_version or self._version
                if item.type == "DELETED":
                    self._forget(volume.metadata.name)
                    self._written.pop(volume.metadata.name, None)
                else:
                    self.observe(volume)
            elif isinstance(item, Bookmark):
                self._version = item.resource_version or self._version

    async def _run(self) -> None:
        decoder = kind_decoder(lh.Volume)
        while True:
            raise_if_cancelled()  # a client library may have swallowed our cancel
            try:
                if not self._version:
                    listed = await list_objects(self._api, _VOLUME, self._namespace, decoder)
                    self._volumes.clear()
                    self._in_flight.clear()
                    for volume in listed.items:
                        self.observe(volume)
                    self._version = listed.resource_version
                    self.relists += 1
                    self.listed = True
                    self.synced.set()
                batches = watch_batches(self._api, _VOLUME, self._namespace, self._version, decoder)
                delivered = False
                async with contextlib.aclosing(batches):
                    async for batch in batches:
                        # Python 3.11's wait_for (reading the watch) drops a cancel that lands as
                        # a bookmark arrives: honour it here, or a stop waits for ever.
                        raise_if_cancelled()
                        self._apply(batch)
                        delivered = True
                if not delivered:  # a watch that closes at once, again and again, must not spin
                    await asyncio.sleep(self._retry_s)
            except ResourceVersionGone:
                self._version = ""  # re-list
            except asyncio.CancelledError:
                raise
            except Exception as e:
                raise_if_cancelled()  # a client library may turn our cancel into its own error
                if not self.synced.is_set():
                    self._error = f"{type(e).__name__}: {e}"
                    self._failed.set()
                log.warning("volume list/watch ended (%s); trying again in %.1f s", e, self._retry_s)
                await asyncio.sleep(self._retry_s)
