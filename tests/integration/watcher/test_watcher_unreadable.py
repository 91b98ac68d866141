"""An object that does not decode: parked in LH_DEAD once, announced UNREADABLE on its own subject,
and never in the way of the rest of its kind; when it is fixed or deleted, the bus follows.

Real NATS, the sandbox emulator, the watcher in-process (as test_watcher_faults.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client

from corral_bus import Bus
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.subjects import object_subject
from corral_sandbox.emulator import Emulator
from corral_watcher.watcher import Watcher
from tests.fixtures.processes import eventually
from tests.integration.watcher.support import (
    FAST_WATCH,
    GROUP,
    NAMESPACE,
    VERSION,
    Volumes,
    dead_letters,
    last_per_subject,
    mismatches,
    stream_history,
    until_no_problems,
    volume_body,
)

pytestmark = pytest.mark.integration

SETTINGS = msgspec.structs.replace(
    FAST_WATCH, resync_period=0.5
)  # re-list often: a re-list must not report the same version again


def broken_body(name: str) -> dict[str, Any]:
    body = volume_body(name)
    body["spec"]["numberOfReplicas"] = "three"  # a string where the model reads an integer
    return body


def subject(name: str) -> str:
    return object_subject("volume", NAMESPACE, name)


async def test_unreadable_volumes_go_to_lh_dead_once_and_are_announced(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus
) -> None:
    volumes = Volumes(kube_api)
    await volumes.create("vol-0")
    await volumes.crd.create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "volumes", broken_body("listed-bad")
    )
    w = Watcher(kube_api, bus, ["volume"], SETTINGS, ack_timeout=1.0)
    await w.start()
    try:
        async with asyncio.timeout(20):
            await w.wait_synced()
        await volumes.create("vol-1")
        await volumes.crd.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "volumes", broken_body("watched-bad")
        )
        await volumes.create("vol-2")

        async def readable_ones() -> list[str]:
            problems = mismatches(emulator, await stream_history(bus))
            return [p for p in problems if "-bad" not in p]

        await until_no_problems(readable_ones, what="the readable volumes on the bus")
        await eventually(lambda: w.kinds["volume"].lists >= 4, what="three re-lists after the bad ones")

        letters = await eventually(lambda: _two(dead_letters(bus)), what="two dead letters in LH_DEAD")
        truth = {o["metadata"]["name"]: o for o in emulator.list(GROUP, "volumes", NAMESPACE)}
        assert sorted((d.kind, d.namespace, d.name) for d in letters) == [
            ("Volume", NAMESPACE, "listed-bad"),
            ("Volume", NAMESPACE, "watched-bad"),
        ]
        for letter in letters:
            assert letter.resource_version == truth[letter.name]["metadata"]["resourceVersion"]
            assert letter.reason.startswith("undecodable: ") and "numberOfReplicas" in letter.reason
            assert letter.subject == subject(letter.name)
            assert msgspec.json.decode(letter.payload)["metadata"]["name"] == letter.name

        history = await stream_history(bus, "lh.obj.volume.>")
        markers = [s.event for s in history if s.event.type is EventType.UNREADABLE]
        # once each, though every re-list found them again
        assert sorted(e.name for e in markers) == ["listed-bad", "watched-bad"]
        for marker in markers:
            assert marker.object is None and "numberOfReplicas" in marker.reason
            assert marker.resource_version == truth[marker.name]["metadata"]["resourceVersion"]
        assert w.metrics.value("corral_watcher_undecodable_lines_total", kind="volume") == 2
        assert w.metrics.value("corral_watcher_unreadable_objects", kind="volume") == 2
    finally:
        await w.stop()


async def _two(letters: Any) -> Any:
    found = await letters
    return found if len(found) >= 2 else None


async def test_a_mended_volume_is_published_and_a_deleted_one_gets_its_tombstone(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus
) -> None:
    volumes = Volumes(kube_api)
    w = Watcher(kube_api, bus, ["volume"], SETTINGS, ack_timeout=1.0)
    await w.start()
    try:
        async with asyncio.timeout(20):
            await w.wait_synced()
        for name in ("to-mend", "to-delete"):
            await volumes.crd.create_namespaced_custom_object(
                GROUP, VERSION, NAMESPACE, "volumes", broken_body(name)
            )

        async def last() -> dict[str, ObjectEvent[Any]]:
            return last_per_subject(await stream_history(bus, "lh.obj.volume.>"))

        async def both_unreadable() -> bool:
            held = await last()
            return all(
                (e := held.get(subject(n))) is not None and e.type is EventType.UNREADABLE
                for n in ("to-mend", "to-delete")
            )

        await eventually(both_unreadable, what="both announced UNREADABLE")
        await volumes.crd.patch_namespaced_custom_object(  # type: ignore[call-arg]
            GROUP,
            VERSION,
            NAMESPACE,
            "volumes",
            "to-mend",
            {"spec": {"numberOfReplicas": 2}},
            _content_type="application/merge-patch+json",
        )
        await volumes.delete("to-delete")

        async def settled() -> list[str]:
            held = await last()
            mended, deleted = held.get(subject("to-mend")), held.get(subject("to-delete"))
            problems = []
            if mended is None or mended.type is not EventType.MODIFIED:
                problems.append(f"to-mend: {mended and mended.type}")
            if deleted is None or deleted.type is not EventType.DELETED:
                problems.append(f"to-delete: {deleted and deleted.type}")
            return problems

        await until_no_problems(settled, what="the mended volume published, the deleted one buried")
        mended = (await last())[subject("to-mend")]
        assert mended.object is not None and mended.object["spec"]["numberOfReplicas"] == 2
        await eventually(
            lambda: w.metrics.value("corral_watcher_unreadable_objects", kind="volume") == 0,
            what="no unreadable volume left",
        )
    finally:
        await w.stop()
