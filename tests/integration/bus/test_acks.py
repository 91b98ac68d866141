"""The shared pipelined-ack core (`corral_bus.acks.AckPipeline`) against a real JetStream.

Both publishers are built on it, so its contract is tested on its own, on the fast path (frames
into the client's buffer, acks from the parser: `corral_bus.natsinternals`) and on nats-py's public
API: the window bounds what is in flight, every message's ack is matched to its id, a refusal is
reported per message with whether JetStream may take it later, `flush` waits for every ack, and a
repeated `Nats-Msg-Id` is stored once and acknowledged as a duplicate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import pytest

from corral_bus import Bus, connect
from corral_bus.acks import AckPipeline, Message, Pending
from corral_model import subjects
from tests.fixtures.nats import NatsServer

pytestmark = pytest.mark.integration


class Recorder(AckPipeline):
    """The core with a policy that only records: what was stored, what was refused and why."""

    def __init__(self, bus: Bus, *, window: int = 64) -> None:
        super().__init__(bus, window=window, ack_timeout=5.0, check_every=0.05)
        self.stored_ids: list[str] = []
        self.refusals: dict[str, tuple[str, bool]] = {}

    async def send(
        self, subject: str, payload: bytes, msg_id: str, headers: Mapping[str, str] | None = None
    ) -> None:
        await self._submit(subject, payload, msg_id, headers)

    async def send_batch(self, messages: list[Message]) -> None:
        await self._submit_batch(messages, None)

    def _after_store(self, token: int, item: Pending, ack: bytes) -> None:
        self.stored_ids.append(item.msg_id)

    def _refused(self, token: int, item: Pending, error: str, *, retryable: bool, err_code: int) -> None:
        self.refusals[item.msg_id] = (error, retryable)
        self._forget(token)


def _volume(i: int) -> str:
    return subjects.object_subject("volume", "longhorn-system", f"pvc-{i}")


@pytest.fixture(params=["fast", "public"])
async def recorder(request: pytest.FixtureRequest, bus: Bus) -> AsyncIterator[Recorder]:
    pipeline = Recorder(bus, window=8)
    await pipeline.start(fast=request.param == "fast")
    # Against a real client the fast path must really be taken, or the internals go untested.
    assert pipeline.fast is (request.param == "fast")
    yield pipeline
    await pipeline.close()


async def test_the_window_bounds_what_is_in_flight_and_is_filled(bus: Bus, recorder: Recorder) -> None:
    seen_max = 0
    for i in range(200):
        await recorder.send(_volume(i), b"{}", f"w-{i}")
        seen_max = max(seen_max, recorder.in_flight)
    # Pipelined: publishing does not wait for each ack, so the window fills; never beyond it.
    assert seen_max == 8
    await recorder.flush()
    assert recorder.in_flight == 0 and recorder.stored == 200
    assert recorder.stored_ids == [f"w-{i}" for i in range(200)]  # one stream: acks in publish order
    assert (await bus.js.stream_info(subjects.OBJECTS_STREAM)).state.messages == 200


async def test_a_batch_larger_than_the_window_goes_out_a_window_at_a_time(
    bus: Bus, recorder: Recorder
) -> None:
    await recorder.send_batch([(_volume(i), b"{}", f"b-{i}", None) for i in range(100)])
    assert recorder.in_flight <= 8
    await recorder.flush()
    assert recorder.stored_ids == [f"b-{i}" for i in range(100)]
    assert (await bus.js.stream_info(subjects.OBJECTS_STREAM)).state.messages == 100


async def test_refusals_are_reported_per_message_id(bus: Bus, recorder: Recorder) -> None:
    await recorder.send(_volume(1), b"{}", "kept-1")
    # The stream refuses this one for good: it was meant for another stream.
    await recorder.send(_volume(2), b"{}", "wrong-stream", {"Nats-Expected-Stream": "ELSEWHERE"})
    await recorder.send("nowhere.at.all", b"{}", "no-stream")  # no stream listens: 503, may come later
    await recorder.send(_volume(3), b"{}", "kept-2")
    await recorder.flush()
    assert recorder.stored_ids == ["kept-1", "kept-2"]
    assert set(recorder.refusals) == {"wrong-stream", "no-stream"}
    error, retryable = recorder.refusals["wrong-stream"]
    assert not retryable and "expected stream does not match" in error
    error, retryable = recorder.refusals["no-stream"]
    assert retryable and "no stream answered" in error


async def test_flush_waits_for_the_ack_of_every_message_sent_before_it(bus: Bus, recorder: Recorder) -> None:
    await recorder.flush()  # nothing in flight: returns at once
    sent = [f"f-{i}" for i in range(100)]
    await recorder.send_batch([(_volume(i), b"{}", msg_id, None) for i, msg_id in enumerate(sent)])
    assert recorder.in_flight > 0  # the last window is still waiting for its acks
    async with asyncio.timeout(10):
        await recorder.flush()
    assert recorder.stored_ids == sent and recorder.in_flight == 0
    # Another task keeps publishing while a flush waits: the flush still covers what came before it.
    more = asyncio.create_task(recorder.send_batch([(_volume(i), b"{}", f"g-{i}", None) for i in range(100)]))
    await recorder.send(_volume(0), b"{}", "before-flush")
    async with asyncio.timeout(10):
        await recorder.flush()
    assert "before-flush" in recorder.stored_ids
    await more
    async with asyncio.timeout(10):
        await recorder.flush()
    assert recorder.in_flight == 0 and recorder.stored == 201 and not recorder.refusals
    assert (await bus.js.stream_info(subjects.OBJECTS_STREAM)).state.messages == 201


async def test_a_repeated_msg_id_is_stored_once_and_acknowledged_as_a_duplicate(
    bus: Bus, recorder: Recorder
) -> None:
    for round_ in range(3):
        await recorder.send_batch([(_volume(i), f"{round_}".encode(), f"d-{i}", None) for i in range(10)])
        await recorder.flush()
    assert recorder.stored == 30 and recorder.duplicates == 20
    info = await bus.js.stream_info(subjects.OBJECTS_STREAM)
    assert info.state.messages == 10
    first = await bus.js.get_last_msg(subjects.OBJECTS_STREAM, _volume(0))
    assert first.data == b"0"  # the repeats were dropped, not stored over the first


async def test_pipelines_sharing_a_connection_keep_their_own_acks(nats_server: NatsServer, bus: Bus) -> None:
    shared = await connect(nats_server.url, name="shared")
    try:
        first, second = Recorder(shared), Recorder(shared)
        await first.start()
        await second.start()
        await first.send(_volume(1), b"{}", "first-1")
        await second.send(_volume(2), b"{}", "second-1")
        await first.flush()
        await second.flush()
        assert first.stored_ids == ["first-1"] and second.stored_ids == ["second-1"]
        await first.close()
        # Closing one must not take the other's acks away.
        await second.send(_volume(3), b"{}", "second-2")
        async with asyncio.timeout(5):
            await second.flush()
        assert second.stored_ids == ["second-1", "second-2"] and second.fast
        await second.close()
        # With no pipeline left the client is nats-py's own again: a plain request still works.
        assert (await shared.js.stream_info(subjects.OBJECTS_STREAM)).state.messages == 3
    finally:
        await shared.close()
