"""DELETED events are tombstones: filling the subject's history, they replace it, and expire after
their TTL. And no one may cut LH_OBJECTS short: rollups, purges and message deletes are refused."""

from __future__ import annotations

import asyncio

import pytest
from nats.js.errors import APIError

from corral_bus import Bus, Publisher, StreamSettings, tombstone_headers
from corral_bus.bootstrap import BootstrapReader, StreamMessage
from corral_bus.streams import MSG_ID_HEADER, ROLLUP_HEADER
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


async def test_no_one_may_roll_up_purge_or_delete_from_lh_objects(bus: Bus) -> None:
    stream = subjects.OBJECTS_STREAM
    publisher = Publisher(bus)
    for i in range(4):
        subject = subjects.object_subject("volume", "longhorn-system", f"pvc-{i}")
        await publisher.publish(subject, f"v{i}".encode(), msg_id=f"pvc-{i}")
    await publisher.flush()
    await publisher.close()
    before = (await bus.js.stream_info(stream)).state.messages
    assert before == 4

    subject = subjects.object_subject("volume", "longhorn-system", "pvc-0")
    for rollup in ("all", "sub"):
        with pytest.raises(APIError, match="rollup not permitted"):
            await bus.js.publish(subject, b"", headers={ROLLUP_HEADER: rollup, MSG_ID_HEADER: rollup})
    with pytest.raises(APIError, match="purge not permitted"):
        await bus.js.purge_stream(stream)
    with pytest.raises(APIError, match="purge not permitted"):
        await bus.js.purge_stream(stream, subject=subject)
    with pytest.raises(APIError, match="delete not permitted"):
        await bus.js.delete_msg(stream, 1)
    assert (await bus.js.stream_info(stream)).state.messages == before
