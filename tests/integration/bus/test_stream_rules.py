"""The storage rules corral leans on beyond publish and consume, pinned on every server the contract
suite runs on (the in-memory fake included): history per object, one consumer per work-queue
subject, reading by subject without a consumer (CommandFeed.scan, takeover's stream_end), and the
KV compare-and-set a lease is made of, and an idle ephemeral consumer going away by itself."""

from __future__ import annotations

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, KeyValueConfig, RetentionPolicy, StreamConfig
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError

from corral_bus import Bus, Publisher
from corral_model import subjects
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration


async def test_an_object_keeps_its_last_n_events(bus: Bus) -> None:
    subject = subjects.object_subject("volume", "longhorn-system", "pvc-1")
    publisher = Publisher(bus)
    for version in range(8):
        await publisher.publish(subject, f"v{version}".encode(), msg_id=f"pvc-1:{version}")
    await publisher.flush()
    await publisher.close()
    info = await bus.js.stream_info(subjects.OBJECTS_STREAM, subjects_filter=subject)
    assert info.state.subjects == {subject: 5}  # objects_history of the contract
    oldest = await bus.js.get_msg(subjects.OBJECTS_STREAM, seq=1, subject=subject, next=True)
    assert oldest.data == b"v3"
    assert (await bus.js.get_last_msg(subjects.OBJECTS_STREAM, subject)).data == b"v7"


async def work_queue(bus: Bus) -> str:
    """A work queue of its own (the contract's command streams each take one sender's subjects)."""
    await bus.js.add_stream(StreamConfig(name="WQ", subjects=["wq.>"], retention=RetentionPolicy.WORK_QUEUE))
    return "WQ"


async def test_a_work_queue_takes_one_consumer_per_subject(bus: Bus) -> None:
    stream = await work_queue(bus)
    await bus.js.add_consumer(stream, ConsumerConfig(durable_name="actuator", filter_subject="wq.a.>"))
    await bus.js.add_consumer(stream, ConsumerConfig(durable_name="actuator", filter_subject="wq.a.>"))
    await bus.js.add_consumer(stream, ConsumerConfig(durable_name="other", filter_subject="wq.b.>"))
    with pytest.raises(BadRequestError):
        await bus.js.add_consumer(stream, ConsumerConfig(durable_name="rival", filter_subject="wq.*.x"))
    with pytest.raises(BadRequestError):
        await bus.js.add_consumer(stream, ConsumerConfig(durable_name="greedy"))


async def test_queued_messages_are_read_by_subject_without_a_consumer(bus: Bus) -> None:
    await work_queue(bus)
    mine, theirs = "wq.toy.setting.ns.{}", "wq.other.setting.ns.{}"
    publisher = Publisher(bus)
    for i in range(3):
        await publisher.publish(mine.format(i), f"mine {i}".encode(), msg_id=f"m{i}")
        await publisher.publish(theirs.format(i), f"theirs {i}".encode(), msg_id=f"t{i}")
    await publisher.flush()
    await publisher.close()
    stream, wanted = "WQ", "wq.toy.>"
    seq, seen = 1, []
    while True:
        try:
            message = await bus.js.get_msg(stream, seq=seq, subject=wanted, next=True)
        except NotFoundError:
            break
        assert message.seq is not None
        seen.append((message.seq, message.data))
        seq = message.seq + 1
    assert seen == [(1, b"mine 0"), (3, b"mine 1"), (5, b"mine 2")]
    last = await bus.js.get_last_msg(stream, wanted)
    assert (last.seq, last.subject) == (5, mine.format(2))
    with pytest.raises(NotFoundError):
        await bus.js.get_last_msg(stream, "wq.nobody.>")


async def test_kv_writes_are_compare_and_set_on_the_revision(bus: Bus) -> None:
    kv = await bus.js.create_key_value(KeyValueConfig(bucket="contract-cas", history=1))
    first = await kv.create("lease", b"a")
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("lease", b"b")  # exists already
    second = await kv.update("lease", b"a again", last=first)
    assert second > first
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.update("lease", b"b", last=first)  # a stale revision
    entry = await kv.get("lease")
    assert (entry.value, entry.revision) == (b"a again", second)
    with pytest.raises(BadRequestError, match="wrong last sequence"):  # nats-py does not map it here
        await kv.delete("lease", last=first)
    await kv.delete("lease", last=second)
    with pytest.raises(KeyNotFoundError):
        await kv.get("lease")
    third = await kv.create("lease", b"b")  # free again after a delete
    assert third > second
    assert (await kv.get("lease")).value == b"b"


async def test_an_idle_ephemeral_consumer_is_reaped_by_the_server(bus: Bus) -> None:
    # What BootstrapReader counts on when it cannot delete its consumer (NATS away at close).
    config = ConsumerConfig(ack_policy=AckPolicy.NONE, inactive_threshold=0.5, mem_storage=True)
    info = await bus.js.add_consumer(subjects.OBJECTS_STREAM, config)
    assert info.name is not None
    name = info.name

    async def reaped() -> bool:
        try:
            await bus.js.consumer_info(subjects.OBJECTS_STREAM, name)
        except NotFoundError:
            return True
        return False

    assert not await reaped()
    await eventually(reaped, within=10, what="the idle consumer deleted")
