"""DELETED events are tombstones: filling the subject's history, they replace it, and expire after
their TTL."""

from __future__ import annotations

import asyncio

import pytest

from corral_bus import Bus, Publisher, StreamSettings, tombstone_headers
from corral_bus.bootstrap import BootstrapReader, StreamMessage
from corral_model import subjects
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration


async def _snapshot(bus: Bus) -> list[StreamMessage]:
    reader = BootstrapReader(bus, [f"{subjects.OBJECTS_PREFIX}.volume.>"])
    out: list[StreamMessage] = []
    async with asyncio.timeout(10):
        iterator = aiter(reader)
        while not reader.ready.is_set():
            out.append(await anext(iterator))
    await reader.close()
    return out


async def test_a_tombstone_filling_the_history_replaces_it_and_expires(bus: Bus) -> None:
    gone = subjects.object_subject("volume", "longhorn-system", "pvc-gone")
    kept = subjects.object_subject("volume", "longhorn-system", "pvc-kept")
    publisher = Publisher(bus)
    for version in range(3):
        await publisher.publish(gone, f"gone v{version}".encode(), msg_id=f"gone:{version}")
        await publisher.publish(kept, f"kept v{version}".encode(), msg_id=f"kept:{version}")
    history = StreamSettings().objects_history
    for copy in range(history):  # as the watcher does (corral_watcher.tombstones)
        await publisher.publish(
            gone, b"gone DELETED", msg_id=f"gone:deleted.{copy}", headers=tombstone_headers(1.0)
        )
    await publisher.flush()

    info = await bus.js.stream_info(subjects.OBJECTS_STREAM, subjects_filter=gone)
    assert info.state.subjects == {gone: history}  # only tombstones: the older events were pushed out
    assert sorted(m.data for m in await _snapshot(bus)) == [b"gone DELETED", b"kept v2"]

    async def tombstone_expired() -> bool:
        state = (await bus.js.stream_info(subjects.OBJECTS_STREAM, subjects_filter=gone)).state
        return not state.subjects

    await eventually(tombstone_expired, within=10, what="tombstone expired")
    # The deleted object is not resurrected from older events; the other one is untouched.
    assert [m.data for m in await _snapshot(bus)] == [b"kept v2"]
    await publisher.close()
