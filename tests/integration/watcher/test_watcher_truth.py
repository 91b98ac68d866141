"""What the API server vouches for when the stream claims a newer state (corral_watcher.truth)."""

from __future__ import annotations

import msgspec
import pytest
from kubernetes_asyncio import client

from corral_model.envelopes import EventType, ObjectEvent
from corral_sandbox.emulator import Emulator
from corral_watcher.metrics import WatcherMetrics
from corral_watcher.truth import ApiTruth
from tests.integration.watcher.support import GROUP, NAMESPACE, Volumes

pytestmark = pytest.mark.integration


def _event(name: str, type_: EventType = EventType.MODIFIED) -> bytes:
    event: ObjectEvent[None] = ObjectEvent(
        type=type_, kind="volume", namespace=NAMESPACE, name=name, resource_version="1"
    )
    return msgspec.json.encode(event)


def _rv(emulator: Emulator, name: str) -> int:
    volume = next(o for o in emulator.list(GROUP, "volumes", NAMESPACE) if o["metadata"]["name"] == name)
    return int(volume["metadata"]["resourceVersion"])


async def test_the_newest_version_is_the_objects_own_or_the_lists_once_it_is_gone(
    emulator: Emulator, kube_api: client.ApiClient
) -> None:
    truth = ApiTruth(kube_api, WatcherMetrics())
    volumes = Volumes(kube_api)
    await volumes.create("vol-a")
    await volumes.create("vol-b")
    await volumes.set_image("vol-a", "longhornio/longhorn-engine:v1.8.0")
    await volumes.create("vol-c")  # the cluster moves on: vol-a's own version stays behind
    assert await truth.newest(_event("vol-a")) == _rv(emulator, "vol-a") < emulator.resource_version
    await volumes.delete("vol-b")
    assert await truth.newest(_event("vol-b", EventType.DELETED)) == emulator.resource_version
    assert await truth.newest(_event("", EventType.RESYNCED)) == emulator.resource_version


def test_a_contradiction_is_counted_per_kind() -> None:
    metrics = WatcherMetrics()
    truth = ApiTruth(None, metrics)  # type: ignore[arg-type]  # reporting never asks the API
    truth.contradicted("lh.obj.volume.ns.vol-a", _event("vol-a"), 999, 12)
    assert metrics.value("corral_watcher_contradicted_events_total", kind="volume") == 1
