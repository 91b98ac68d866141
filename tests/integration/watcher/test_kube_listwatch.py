"""corral_kube listing and watching against the emulator over real HTTP (kubernetes-asyncio)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from kubernetes_asyncio import client

from corral_kube.decoding import Bookmark, StreamItem, WatchEvent, kind_decoder
from corral_kube.errors import KubeApiError, ResourceVersionGone, WatchStalled
from corral_kube.listing import list_objects
from corral_kube.watching import watch_batches
from corral_model.kinds import KINDS, KindInfo
from corral_model.longhorn import Volume
from corral_sandbox.emulator import Emulator
from tests.integration.watcher.support import NAMESPACE, Volumes

pytestmark = pytest.mark.integration

VOLUMES = KINDS["volume"]
decoder = kind_decoder(Volume)


async def test_a_paged_list_returns_every_object_at_one_version(
    emulator: Emulator, kube_api: client.ApiClient
) -> None:
    volumes = Volumes(kube_api)
    for i in range(10):
        await volumes.create(f"vol-{i}")
    listed = await list_objects(kube_api, VOLUMES, NAMESPACE, decoder, page_size=3)
    assert sorted(v.metadata.name for v in listed.items) == sorted(f"vol-{i}" for i in range(10))
    assert listed.resource_version == str(emulator.resource_version)
    assert all(isinstance(v, Volume) for v in listed.items)


async def test_watch_from_the_list_version_sees_each_later_change_in_order(
    emulator: Emulator, kube_api: client.ApiClient
) -> None:
    volumes = Volumes(kube_api)
    await volumes.create("vol-0")
    listed = await list_objects(kube_api, VOLUMES, NAMESPACE, decoder)
    await volumes.create("vol-1")
    await volumes.set_image("vol-0", "longhornio/longhorn-engine:v1.8.0")
    await volumes.delete("vol-1")
    seen: list[tuple[str, str]] = []
    bookmarks: list[str] = []
    batches = watch_batches(kube_api, VOLUMES, NAMESPACE, listed.resource_version, decoder, server_timeout=10)
    async with contextlib.aclosing(batches):
        async for batch in batches:
            for item in batch:
                if isinstance(item, WatchEvent):
                    seen.append((item.type, item.object.metadata.name))
                elif isinstance(item, Bookmark):
                    bookmarks.append(item.resource_version)
            if len(seen) >= 3 and bookmarks:
                break
    assert seen == [("ADDED", "vol-1"), ("MODIFIED", "vol-0"), ("DELETED", "vol-1")]
    assert bookmarks[-1] == str(emulator.resource_version)


async def test_watch_from_a_compacted_version_is_gone(emulator: Emulator, kube_api: client.ApiClient) -> None:
    volumes = Volumes(kube_api)
    await volumes.create("vol-0")
    old = str(emulator.resource_version)
    await volumes.create("vol-1")
    emulator.compact()
    with pytest.raises(ResourceVersionGone):
        async for _ in watch_batches(kube_api, VOLUMES, NAMESPACE, old, decoder):
            pass


async def test_a_silent_watch_is_reported_stalled(emulator: Emulator, kube_api: client.ApiClient) -> None:
    listed = await list_objects(kube_api, VOLUMES, NAMESPACE, decoder)
    emulator.faults.watch_cut_after_events = 0
    emulator.faults.watch_drop_silently = True
    items: list[StreamItem] = []

    async def read() -> None:
        async for batch in watch_batches(
            kube_api, VOLUMES, NAMESPACE, listed.resource_version, decoder, inactivity_timeout=0.5
        ):
            items.extend(batch)

    reading = asyncio.create_task(read())
    await Volumes(kube_api).create("vol-0")
    with pytest.raises(WatchStalled):
        async with asyncio.timeout(10):
            await reading
    assert not any(isinstance(i, WatchEvent) for i in items)


async def test_an_unknown_resource_is_an_api_error(kube_api: client.ApiClient) -> None:
    missing = KindInfo(
        token="nothing",
        kind="Nothing",
        group="longhorn.io",
        version="v1beta2",
        plural="nothings",
        namespaced=True,
        struct=Volume,
    )
    with pytest.raises(KubeApiError) as raised:
        await list_objects(kube_api, missing, NAMESPACE, decoder)
    assert raised.value.status == 404
