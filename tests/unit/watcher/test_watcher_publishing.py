"""OrderedPublisher: one event per object in flight, each expecting the sequence its predecessor's
ack reported, and a recovery from lost acks that never lets an older event overtake a newer one.

A recorded stand-in for the nats-py client plays the server, so the test decides exactly which
messages are acknowledged, which are lost and which are refused; the real server path runs in the
integration tests (NATS restarted mid-stream).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

from nats.js.errors import NotFoundError

from corral_bus import Bus, tombstone_headers
from corral_watcher.publishing import OrderedPublisher

OK = b'{"stream":"LH_OBJECTS","seq":1}'


def stored_at(seq: int) -> bytes:
    return b'{"stream":"LH_OBJECTS","seq":%d}' % seq


async def until(predicate: Callable[[], bool], *, within: float, what: str) -> None:
    """Poll `predicate` until it holds; fail naming `what` after `within` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {within}s")
        await asyncio.sleep(0.01)


class _Sub:
    _id = 1

    async def unsubscribe(self) -> None:
        return None


class RecordingClient:
    """Just enough of nats-py's Client: records (subject, msg id, reply) of every publish."""

    is_connected = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str]] = []
        self.expects: list[str | None] = []
        """Nats-Expected-Last-Subject-Sequence of each publish (None: none)."""

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def subscribe(self, subject: str, **kwargs: Any) -> _Sub:
        return _Sub()

    async def publish(self, subject: str, payload: bytes, reply: str, headers: dict[str, str]) -> None:
        self.sent.append((subject, headers["Nats-Msg-Id"], reply))
        self.expects.append(headers.get("Nats-Expected-Last-Subject-Sequence"))


async def started(ack_timeout: float = 0.05, history: int = 1) -> tuple[OrderedPublisher, RecordingClient]:
    """`history`: the messages per subject the stream keeps (a tombstone's copies fill it)."""
    client = RecordingClient()
    bus = Bus(nc=cast("Any", client), js=cast("Any", None), name="test")
    publisher = OrderedPublisher(bus, ack_timeout=ack_timeout, history=history)
    await publisher.start(fast=False)
    return publisher, client


def ack(publisher: OrderedPublisher, reply: str, data: bytes = OK, headers: bytes | None = None) -> None:
    publisher._on_ack_raw(reply.encode(), data, headers)


async def test_acked_messages_drain_the_window() -> None:
    publisher, client = await started()
    await publisher.publish_batch([("s.a", b"1", "a1", None), ("s.b", b"2", "b1", None)])
    assert publisher.in_flight == 2
    for _, _, reply in client.sent:
        ack(publisher, reply)
    async with asyncio.timeout(1):
        await publisher.flush()
    assert publisher.acked == 2 and publisher.recoveries == 0
    await publisher.close()


async def test_an_objects_next_event_waits_for_the_ack_and_expects_its_sequence() -> None:
    publisher, client = await started(ack_timeout=60)
    publisher.learn("s.a", 7)  # what bootstrap read from the stream
    await publisher.publish_batch(
        [("s.a", b"", "a1", None), ("s.b", b"", "b1", None), ("s.a", b"", "a2", None)]
    )
    # a2 waits for a1's ack: its expectation is the sequence that ack reports.
    assert [m for _, m, _ in client.sent] == ["a1", "b1"] and client.expects == ["7", "0"]
    assert publisher.held == 1
    ack(publisher, client.sent[0][2], stored_at(8))
    await until(lambda: len(client.sent) == 3, within=5, what="a2 released")
    assert client.sent[2][1] == "a2" and client.expects[2] == "8"
    ack(publisher, client.sent[1][2], stored_at(9))
    ack(publisher, client.sent[2][2], stored_at(10))
    async with asyncio.timeout(1):
        await publisher.flush()
    assert publisher.last_seq == {"s.a": 10, "s.b": 9}
    await publisher.close()


async def test_lost_messages_are_resent_with_their_expectation() -> None:
    publisher, client = await started()
    await publisher.publish_batch(
        [
            ("s.a", b"", "a1", None),
            ("s.a", b"", "a2", None),
            ("s.b", b"", "b1", None),
            ("s.c", b"", "c1", None),
        ]
    )
    replies = {msg_id: reply for _, msg_id, reply in client.sent}
    assert list(replies) == ["a1", "b1", "c1"]  # a2 held behind a1
    ack(publisher, replies["c1"], stored_at(3))  # a1 and b1 are lost
    await until(lambda: publisher.recoveries >= 1 and len(client.sent) == 5, within=5, what="recovery")
    # The same events, expecting the same: a frame of the first send stored late cannot land twice.
    assert [m for _, m, _ in client.sent[3:]] == ["a1", "b1"] and client.expects[3:] == ["0", "0"]
    ack(publisher, client.sent[3][2], stored_at(4))
    await until(lambda: len(client.sent) == 6, within=5, what="a2 released")
    assert client.sent[5][1] == "a2" and client.expects[5] == "4"
    for _, _, reply in client.sent[4:]:
        ack(publisher, reply, stored_at(5))
    async with asyncio.timeout(1):
        await publisher.flush()
    await publisher.close()


async def test_a_held_event_is_never_sent_before_its_predecessor_is_stored() -> None:
    publisher, client = await started()
    await publisher.publish_batch([("s.a", b"", "a1", None), ("s.a", b"", "a2", None)])
    await until(lambda: publisher.recoveries >= 2, within=5, what="two recoveries of a1")
    assert {m for _, m, _ in client.sent} == {"a1"}  # a2 is not sent while a1 is unacknowledged
    await publisher.close()


async def test_a_refused_message_is_retried_until_stored() -> None:
    publisher, client = await started(ack_timeout=10)
    await publisher.publish_batch([("s.a", b"", "a1", None)])
    ack(publisher, client.sent[0][2], b"", b"NATS/1.0 503\r\n\r\n")  # no stream answered yet
    await until(lambda: len(client.sent) == 2, within=5, what="re-send after a refusal")
    assert client.sent[1][1] == "a1"
    ack(publisher, client.sent[1][2], b'{"stream":"LH_OBJECTS","seq":5,"duplicate":true}')
    async with asyncio.timeout(1):
        await publisher.flush()
    assert publisher.duplicates == 1
    await publisher.close()


async def test_a_full_window_waits_for_acks() -> None:
    client = RecordingClient()
    publisher = OrderedPublisher(Bus(nc=cast("Any", client), js=cast("Any", None), name="t"), window=2)
    await publisher.start(fast=False)
    sending = asyncio.create_task(publisher.publish_batch([(f"s.{i}", b"", f"x{i}", None) for i in range(3)]))
    await until(lambda: len(client.sent) == 2, within=2, what="window filled")
    assert not sending.done()
    ack(publisher, client.sent[0][2])
    async with asyncio.timeout(1):
        await sending
    assert [m for _, m, _ in client.sent] == ["x0", "x1", "x2"]
    await publisher.close()


async def test_held_events_count_in_the_window() -> None:
    client = RecordingClient()
    publisher = OrderedPublisher(Bus(nc=cast("Any", client), js=cast("Any", None), name="t"), window=2)
    await publisher.start(fast=False)
    sending = asyncio.create_task(publisher.publish_batch([("s.x", b"", f"x{i}", None) for i in range(4)]))
    await until(lambda: publisher.held == 2, within=2, what="two events held")
    assert not sending.done() and len(client.sent) == 1  # a stalled stream stops the watch
    ack(publisher, client.sent[0][2], stored_at(1))
    await until(lambda: len(client.sent) == 2, within=2, what="x1 released")
    async with asyncio.timeout(1):
        await sending
    assert [m for _, m, _ in client.sent] == ["x0", "x1"] and publisher.held == 2
    await publisher.close()


async def test_a_gap_in_the_acks_is_recovered_without_waiting_for_the_ack_timeout() -> None:
    publisher, client = await started(ack_timeout=60)
    await publisher.publish_batch([("s.a", b"", "a1", None), ("s.b", b"", "b1", None)])
    ack(publisher, client.sent[1][2])  # b1 stored: a1, sent before it, will never be acknowledged
    await until(lambda: len(client.sent) == 3, within=30, what="a1 re-sent")
    assert client.sent[2][1] == "a1"
    await publisher.close()


class _Stored:
    def __init__(self, seq: int, msg_id: str, resource_version: str) -> None:
        self.seq = seq
        self.headers = {"Nats-Msg-Id": msg_id}
        self.data = b'{"type":"MODIFIED","resourceVersion":"%s"}' % resource_version.encode()


class LastMessages:
    """The stream's last message per subject, as `js.get_last_msg` answers it."""

    def __init__(self) -> None:
        self.last: dict[str, _Stored] = {}
        self.asked: list[str] = []

    async def get_last_msg(self, stream: str, subject: str) -> _Stored:
        self.asked.append(subject)
        if subject not in self.last:
            raise NotFoundError
        return self.last[subject]


def event(resource_version: int) -> bytes:
    return b'{"type":"MODIFIED","resourceVersion":"%d"}' % resource_version


WRONG_LAST = b'{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 9"},"seq":0}'


async def with_stream(stream: LastMessages) -> tuple[OrderedPublisher, RecordingClient]:
    client = RecordingClient()
    publisher = OrderedPublisher(
        Bus(nc=cast("Any", client), js=cast("Any", stream), name="t"), ack_timeout=60
    )
    await publisher.start(fast=False)
    return publisher, client


async def test_a_late_stale_frame_on_top_gets_the_newest_state_published_over_it() -> None:
    stream = LastMessages()
    publisher, client = await with_stream(stream)
    publisher.learn("s.a", 5)
    await publisher.publish_batch([("s.a", event(12), "a12", None), ("s.a", event(13), "a13", None)])
    # Meanwhile a frame sent before a reconnect (state 11) was stored on top of sequence 5.
    stream.last["s.a"] = _Stored(9, "a11", "11")
    ack(publisher, client.sent[0][2], WRONG_LAST)
    await until(lambda: len(client.sent) == 2, within=5, what="a12 re-sent on top of 9")
    assert client.sent[1][1] == "a12" and client.expects[1] == "9" and stream.asked == ["s.a"]
    ack(publisher, client.sent[1][2], stored_at(10))
    await until(lambda: len(client.sent) == 3, within=5, what="a13 released")
    assert client.sent[2][1] == "a13" and client.expects[2] == "10"
    ack(publisher, client.sent[2][2], stored_at(11))
    async with asyncio.timeout(1):
        await publisher.flush()
    assert publisher.conflicts == 1 and publisher.last_seq["s.a"] == 11
    await publisher.close()


async def test_a_refused_event_that_is_already_the_last_one_is_settled_as_stored() -> None:
    stream = LastMessages()
    publisher, client = await with_stream(stream)
    await publisher.publish_batch([("s.a", event(12), "a12", None), ("s.a", event(13), "a13", None)])
    stream.last["s.a"] = _Stored(9, "a12", "12")  # a re-send whose first send was stored after all
    ack(publisher, client.sent[0][2], WRONG_LAST)
    await until(lambda: len(client.sent) == 2, within=5, what="a13 released")
    assert client.sent[1][1] == "a13" and client.expects[1] == "9"
    assert publisher.acked == 1 and publisher.superseded == 0
    await publisher.close()


async def test_a_refused_event_older_than_the_stored_one_is_dropped() -> None:
    stream = LastMessages()
    publisher, client = await with_stream(stream)
    await publisher.publish_batch([("s.a", event(12), "a12", None)])
    stream.last["s.a"] = _Stored(9, "a14", "14")  # another watcher replica is ahead
    ack(publisher, client.sent[0][2], WRONG_LAST)
    async with asyncio.timeout(5):
        await publisher.flush()
    assert publisher.superseded == 1 and len(client.sent) == 1 and publisher.last_seq["s.a"] == 9
    await publisher.close()


async def test_an_unknown_subject_expects_it_empty_and_learns_otherwise() -> None:
    stream = LastMessages()
    publisher, client = await with_stream(stream)
    await publisher.publish_batch([("s.a", event(12), "a12", None)])
    assert client.expects == ["0"]
    stream.last["s.a"] = _Stored(4, "a3", "3")  # a watcher that started without reading the stream
    ack(publisher, client.sent[0][2], WRONG_LAST)
    await until(lambda: len(client.sent) == 2, within=5, what="a12 re-sent")
    assert client.expects[1] == "4"
    await publisher.close()


async def test_a_tombstone_forgets_the_subjects_sequence() -> None:
    publisher, client = await started(ack_timeout=60)
    await publisher.publish_batch([("s.a", b"", "volume:u1:5:deleted", tombstone_headers(60))])
    ack(publisher, client.sent[0][2], stored_at(6))
    async with asyncio.timeout(1):
        await publisher.flush()
    assert "s.a" not in publisher.last_seq  # the map stays the size of the live objects
    await publisher.close()


async def test_a_tombstone_fills_the_subjects_history_with_its_copies_in_order() -> None:
    publisher, client = await started(ack_timeout=60, history=3)
    acked: list[float] = []
    tombstone = ("s.a", b"DELETED", "volume:u1:5:deleted", tombstone_headers(60))
    await publisher.publish_batch([("s.b", b"", "b1", None), tombstone], acked.append)
    # The copies wait behind the tombstone, each for its predecessor's sequence.
    assert [m for _, m, _ in client.sent] == ["b1", "volume:u1:5:deleted"] and publisher.held == 2
    ack(publisher, client.sent[0][2], stored_at(1))
    for n, seq in ((2, 2), (3, 3)):
        ack(publisher, client.sent[-1][2], stored_at(seq))
        await until(lambda n=n: len(client.sent) == n + 1, within=5, what=f"copy {n} released")  # type: ignore[misc]
        assert client.sent[-1][1] == f"volume:u1:5:deleted.{n}" and client.expects[-1] == str(seq)
    assert acked == []  # the batch's callback waits for the last copy
    ack(publisher, client.sent[-1][2], stored_at(4))
    async with asyncio.timeout(1):
        await publisher.flush()
    assert len(acked) == 1
    assert publisher.last_seq == {"s.b": 1}  # the last copy forgot the subject's sequence
    await publisher.close()
