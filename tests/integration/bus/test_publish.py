"""Publishing: every message acked, duplicates by Nats-Msg-Id stored once, failures reported."""

from __future__ import annotations

import time

import pytest
from nats.errors import MaxPayloadError

from corral_bus import Bus, Publisher, PublishError, connect, ensure_streams
from corral_model import subjects
from tests.fixtures.nats import BinaryNats
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration


async def test_duplicate_msg_id_is_stored_once(bus: Bus) -> None:
    publisher = Publisher(bus, window=8)
    for _ in range(3):
        for i in range(20):
            await publisher.publish(f"lh.obj.volume.longhorn-system.v{i}", b'{"n":1}', msg_id=f"event-{i}")
    await publisher.flush()
    info = await bus.js.stream_info(subjects.OBJECTS_STREAM)
    assert info.state.messages == 20
    assert publisher.published == 60
    assert publisher.duplicates == 40
    await publisher.close()


async def test_window_bounds_messages_in_flight(bus: Bus) -> None:
    publisher = Publisher(bus, window=5)
    seen_max = 0
    for i in range(200):
        await publisher.publish("lh.res.actuator.volume.ns.v", b"{}", msg_id=f"r-{i}")
        seen_max = max(seen_max, publisher.in_flight)
    await publisher.flush()
    assert seen_max <= 5
    assert publisher.in_flight == 0
    assert (await bus.js.stream_info(subjects.RESULTS_STREAM)).state.messages == 200
    await publisher.close()


async def test_subject_without_stream_is_a_reported_failure(bus: Bus) -> None:
    publisher = Publisher(bus, give_up_after=1.0)
    await publisher.publish("nowhere.at.all", b"x", msg_id="lost-1")
    await publisher.publish("lh.obj.volume.ns.kept", b"x", msg_id="kept-1")
    with pytest.raises(PublishError) as err:
        await publisher.flush()
    assert [f.msg_id for f in err.value.failures] == ["lost-1"]
    assert "no stream answered" in err.value.failures[0].error
    # Reported once: the next flush is clean.
    await publisher.flush()
    await publisher.close()


async def test_refused_publish_raises_and_is_not_left_in_flight(bus: Bus) -> None:
    publisher = Publisher(bus)
    with pytest.raises(MaxPayloadError):
        await publisher.publish("lh.obj.volume.ns.huge", b"x" * (bus.nc.max_payload + 1), msg_id="huge")
    assert publisher.in_flight == 0
    await publisher.flush()  # nothing pending, nothing failed
    await publisher.close()


async def test_flush_reports_what_could_not_be_stored_while_nats_is_down() -> None:
    # A server of its own: this test takes it away for good.
    server = BinaryNats()
    server.start()
    try:
        own = await connect(server.url, name="stranded")
        await ensure_streams(own.js)
        publisher = Publisher(own, ack_timeout=0.3, give_up_after=1.5)
        await publisher.publish("lh.res.actuator.volume.ns.a", b"{}", msg_id="before")
        await publisher.flush()
        server.stop()
        await eventually(lambda: not own.is_connected, what="disconnected")
        for i in range(5):
            await publisher.publish("lh.res.actuator.volume.ns.a", b"{}", msg_id=f"during-{i}")
        started = time.monotonic()
        with pytest.raises(PublishError) as err:
            await publisher.flush()
        assert time.monotonic() - started < 5
        assert sorted(f.msg_id for f in err.value.failures) == [f"during-{i}" for i in range(5)]
        assert all("not stored within 1.5s" in f.error for f in err.value.failures)
        await publisher.close()
        await own.close()
        assert own.nc.is_closed
    finally:
        server.stop()
