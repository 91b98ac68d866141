"""The watcher against the sandbox emulator and a real NATS server, with faults on.

Every test ends with the same two oracles: the last message per object in LH_OBJECTS equals the
emulator's current state (a deleted object's last message is its tombstone), and no object's stored
events go backwards in resourceVersion.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest
from kubernetes_asyncio import client

from corral_bus import Bus, StreamSettings, connect
from corral_kube.decoding import LAST_APPLIED
from corral_model.envelopes import EventType
from corral_model.subjects import object_subject, resync_subject
from corral_sandbox.emulator import Emulator
from corral_watcher.watcher import Watcher
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.integration.watcher.support import (
    FAST_WATCH,
    GROUP,
    NAMESPACE,
    VERSION,
    Volumes,
    backwards,
    duplicates,
    mismatches,
    stream_history,
    tombstone_copy,
    until_no_problems,
    volume_body,
)

pytestmark = pytest.mark.integration

SETTINGS = FAST_WATCH


@pytest.fixture
async def watcher(kube_api: client.ApiClient, bus: Bus) -> AsyncIterator[Watcher]:
    w = Watcher(kube_api, bus, ["volume", "setting"], SETTINGS, ack_timeout=1.0)
    await w.start()
    async with asyncio.timeout(20):
        await w.wait_synced()
    try:
        yield w
    finally:
        await w.stop()


async def converged(emulator: Emulator, bus: Bus) -> None:
    async def check() -> list[str]:
        return mismatches(emulator, await stream_history(bus))

    await until_no_problems(check, within=30, what="LH_OBJECTS equal to the emulator")
    assert backwards(await stream_history(bus)) == []


async def test_every_change_arrives_once_in_order(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher
) -> None:
    volumes = Volumes(kube_api)
    for i in range(10):
        await volumes.create(f"vol-{i}")
    for i in range(10):
        await volumes.set_image(f"vol-{i}", "longhornio/longhorn-engine:v1.8.0")
    await volumes.delete("vol-3")
    await converged(emulator, bus)
    history = await stream_history(bus, "lh.obj.volume.>")
    assert duplicates(history) == []
    per_object = [s.event.type for s in history if s.subject == object_subject("volume", NAMESPACE, "vol-5")]
    assert per_object == [EventType.ADDED, EventType.MODIFIED]
    # The tombstone and its copies pushed the deleted volume's history out: only the DELETED
    # remains, and it expires.
    tombstones = [s for s in history if s.subject == object_subject("volume", NAMESPACE, "vol-3")]
    assert [s.event.type for s in tombstones] == [EventType.DELETED] * StreamSettings().objects_history
    assert [s for s in tombstones if not tombstone_copy(s)] == tombstones[:1]
    assert tombstones[0].headers.get("Nats-TTL", "").endswith("s")
    # The annotation kubectl apply leaves is dropped; a RESYNCED marker followed the initial list.
    for stored in history:
        if stored.event.object is not None:
            assert LAST_APPLIED not in stored.event.object["metadata"].get("annotations", {})
    assert any(s.subject == resync_subject("volume", NAMESPACE) for s in history)


async def test_watches_cut_every_few_events(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher
) -> None:
    emulator.faults.watch_cut_after_events = 3
    volumes = Volumes(kube_api)
    for i in range(20):
        await volumes.create(f"vol-{i}")
    for round_ in range(2):
        for i in range(20):
            await volumes.set_image(f"vol-{i}", f"longhornio/longhorn-engine:v1.{8 + round_}.0")
    for i in range(0, 20, 4):
        await volumes.delete(f"vol-{i}")
    await converged(emulator, bus)
    history = await stream_history(bus, "lh.obj.volume.>")
    assert duplicates(history) == []
    restarts = watcher.metrics.value("corral_watcher_watch_restarts_total", kind="volume", reason="closed")
    assert restarts >= (20 + 40 + 5) // 3  # every cut was resumed, not re-listed
    assert watcher.metrics.value("corral_watcher_relists_total", kind="volume", reason="gone") == 0


async def test_410_after_changes_made_while_the_watch_was_dead(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher
) -> None:
    volumes = Volumes(kube_api)
    for i in range(8):
        await volumes.create(f"vol-{i}")
    await converged(emulator, bus)
    lists_before = watcher.kinds["volume"].lists

    # Every watch now goes silent at its first event (connection open, nothing sent, no bookmarks):
    # the watcher sees none of what follows until it re-lists.
    emulator.faults.watch_cut_after_events = 0
    emulator.faults.watch_drop_silently = True
    await volumes.create("vol-new")
    await volumes.set_image("vol-1", "longhornio/longhorn-engine:v1.8.0")
    await volumes.delete("vol-2")
    await volumes.delete("vol-3")
    await volumes.create("vol-3")  # re-created by name: a new uid
    emulator.compact()
    emulator.faults.reset()

    await converged(emulator, bus)
    kind = watcher.kinds["volume"]
    assert kind.lists > lists_before
    assert watcher.metrics.value("corral_watcher_gone_total", kind="volume") >= 1
    assert watcher.metrics.value("corral_watcher_watch_restarts_total", kind="volume", reason="stalled") >= 1
    history = await stream_history(bus, "lh.obj.volume.>")
    tombstone = [
        s.event
        for s in history
        if s.subject == object_subject("volume", NAMESPACE, "vol-2") and not tombstone_copy(s)
    ]
    assert [e.type for e in tombstone] == [EventType.DELETED]
    assert (tombstone[0].object or {})["metadata"]["name"] == "vol-2"
    resyncs = [s for s in history if s.subject == resync_subject("volume", NAMESPACE)]
    assert len(resyncs) >= 2  # the initial list and the one after the 410


async def test_nats_restarted_mid_stream(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher, nats_server: NatsServer
) -> None:
    volumes = Volumes(kube_api)
    for i in range(30):
        await volumes.create(f"vol-{i}")
    writes = 0

    async def keep_writing() -> None:
        nonlocal writes
        for round_ in range(10):
            for i in range(30):
                await volumes.set_image(f"vol-{i}", f"longhornio/longhorn-engine:v1.{round_}.{i}")
                writes += 1

    writer = asyncio.create_task(keep_writing())
    await eventually(lambda: writes >= 60, what="writes under way")
    await asyncio.to_thread(nats_server.restart)
    await writer
    await converged(emulator, bus)
    assert bus.reconnects >= 1  # the watcher's connection really went through the restart
    assert duplicates(await stream_history(bus, "lh.obj.volume.>")) == []


async def test_two_replicas_store_each_event_once(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher, nats_server: NatsServer
) -> None:
    second_bus = await connect(nats_server.url, name="watcher-2")
    second = Watcher(kube_api, second_bus, ["volume", "setting"], SETTINGS, ack_timeout=1.0)
    await second.start()
    try:
        emulator.faults.watch_cut_after_events = 5
        volumes = Volumes(kube_api)
        for i in range(15):
            await volumes.create(f"vol-{i}")
        for i in range(15):
            await volumes.set_image(f"vol-{i}", "longhornio/longhorn-engine:v1.8.0")
        await volumes.delete("vol-7")
        async with asyncio.timeout(20):
            await second.wait_synced()
        await converged(emulator, bus)
        await eventually(lambda: second.publisher.in_flight == 0 and watcher.publisher.in_flight == 0)
        history = await stream_history(bus)
        assert duplicates(history) == []
        # Both published; JetStream kept one of each: the second's copy was a duplicate, or (a
        # single server checks the expected last subject sequence first) refused and settled as
        # already stored by reading the subject's last message.
        assert second.publisher.duplicates + second.publisher.conflicts > 0
    finally:
        await second.stop()
        await second_bus.close()


async def test_a_restarted_watcher_tombstones_what_vanished_and_republishes_nothing_else(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher
) -> None:
    volumes = Volumes(kube_api)
    for i in range(6):
        await volumes.create(f"vol-{i}")
    await converged(emulator, bus)
    await watcher.stop()  # no watcher runs while these happen
    await volumes.delete("vol-1")
    await volumes.set_image("vol-2", "longhornio/longhorn-engine:v1.8.0")
    await volumes.create("vol-new")

    restarted = Watcher(kube_api, bus, ["volume", "setting"], SETTINGS, ack_timeout=1.0)
    await restarted.start()
    try:
        async with asyncio.timeout(20):
            await restarted.wait_synced()
        await converged(emulator, bus)
        published = {
            type_: restarted.metrics.value("corral_watcher_events_published_total", kind="volume", type=type_)
            for type_ in ("ADDED", "MODIFIED", "DELETED")
        }
        assert published == {"ADDED": 1, "MODIFIED": 1, "DELETED": 1}
        history = await stream_history(bus, "lh.obj.volume.>")
        vol_1 = [s for s in history if s.subject.endswith(".vol-1")]
        assert [s.event.type for s in vol_1 if not tombstone_copy(s)] == [EventType.DELETED]
        assert duplicates(history) == []
    finally:
        await restarted.stop()


async def test_an_object_that_does_not_decode_is_reported_and_costs_nothing_else(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus
) -> None:
    volumes = Volumes(kube_api)
    await volumes.create("vol-0")
    broken = volume_body("vol-broken")
    broken["spec"]["numberOfReplicas"] = "three"
    await volumes.crd.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "volumes", broken)
    w = Watcher(kube_api, bus, ["volume"], SETTINGS, ack_timeout=1.0)
    await w.start()
    try:
        async with asyncio.timeout(20):
            await w.wait_synced()  # the list with a broken item still completes
        await volumes.create("vol-1")
        broken_too = volume_body("vol-broken-2")
        broken_too["spec"]["numberOfReplicas"] = "three"
        await volumes.crd.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "volumes", broken_too)
        await volumes.create("vol-2")

        async def check() -> list[str]:
            problems = mismatches(emulator, await stream_history(bus))
            return [p for p in problems if not p.startswith("vol-broken")]

        await until_no_problems(check, what="the readable volumes on the bus")
        assert w.metrics.value("corral_watcher_undecodable_lines_total", kind="volume") == 2
        # The broken ones get nothing but their UNREADABLE marker (test_watcher_unreadable.py).
        broken_events = [s.event for s in await stream_history(bus) if "broken" in s.subject]
        assert {(e.name, e.type) for e in broken_events} == {
            ("vol-broken", EventType.UNREADABLE),
            ("vol-broken-2", EventType.UNREADABLE),
        }
    finally:
        await w.stop()


async def test_periodic_resync_relists_and_republishes_nothing_unchanged(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus
) -> None:
    volumes = Volumes(kube_api)
    for i in range(3):
        await volumes.create(f"vol-{i}")
    w = Watcher(kube_api, bus, ["volume"], msgspec.structs.replace(SETTINGS, resync_period=0.3))
    await w.start()
    try:
        await eventually(lambda: w.kinds["volume"].lists >= 4, what="three periodic resyncs")
        await volumes.set_image("vol-1", "longhornio/longhorn-engine:v1.8.0")
        await converged(emulator, bus)
        assert w.metrics.value("corral_watcher_relists_total", kind="volume", reason="resync") >= 3
        published = {
            type_: w.metrics.value("corral_watcher_events_published_total", kind="volume", type=type_)
            for type_ in ("ADDED", "MODIFIED", "DELETED")
        }
        assert published == {"ADDED": 3, "MODIFIED": 1, "DELETED": 0}
        assert duplicates(await stream_history(bus)) == []
    finally:
        await w.stop()


async def test_watches_cut_on_a_timer_with_a_slow_api_server(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher
) -> None:
    emulator.faults.watch_cut_after_s = 0.2
    emulator.faults.latency_s = 0.02
    volumes = Volumes(kube_api)
    for i in range(10):
        await volumes.create(f"vol-{i}")
    for round_ in range(5):
        for i in range(10):
            await volumes.set_image(f"vol-{i}", f"longhornio/longhorn-engine:v1.{round_}.0")
    await volumes.delete("vol-9")
    await converged(emulator, bus)
    assert duplicates(await stream_history(bus, "lh.obj.volume.>")) == []
    assert watcher.metrics.value("corral_watcher_watch_restarts_total", kind="volume", reason="closed") >= 2


async def test_nats_restarted_under_a_burst(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, watcher: Watcher, nats_server: NatsServer
) -> None:
    """Thousands of events in flight when the server goes: what was lost on the wire is re-sent."""
    objects = [volume_body(f"vol-{i}") for i in range(100)]
    kind = watcher.kinds["volume"]
    for round_ in range(30):
        for obj in objects:
            obj["spec"]["image"] = f"longhornio/longhorn-engine:v1.{round_}.0"
        emulator.load(GROUP, "volumes", objects)  # straight into the store: a burst of events
        await eventually(
            lambda: int(kind.resource_version or 0) >= emulator.resource_version, what="caught up"
        )
        if round_ == 10:
            restart = asyncio.create_task(asyncio.to_thread(nats_server.restart))
    await restart
    # Whether a message was on the wire at that instant is up to timing (publisher.recoveries says);
    # either way the stream must end equal to the emulator with no object going backwards.
    await converged(emulator, bus)
    assert duplicates(await stream_history(bus, "lh.obj.volume.>")) == []
