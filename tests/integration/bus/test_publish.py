"""Publishing: every message acked, duplicates by Nats-Msg-Id stored once, failures reported."""

from __future__ import annotations

import pytest
from nats.errors import MaxPayloadError

from corral_bus import Bus, Publisher, PublishError
from corral_model import subjects

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
