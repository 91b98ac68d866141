"""OrderedPublisher's recovery: lost acks never let an older event of an object overtake a newer one.

A recorded stand-in for the nats-py client plays the server, so the test decides exactly which
messages are acknowledged, which are lost and which are refused; the real server path runs in the
integration tests (NATS restarted mid-stream).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, cast

from corral_bus import Bus
from corral_watcher.publishing import OrderedPublisher

OK = b'{"stream":"LH_OBJECTS","seq":1}'


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

    def new_inbox(self) -> str:
        return "_INBOX.test"

    async def subscribe(self, subject: str, **kwargs: Any) -> _Sub:
        return _Sub()

    async def publish(self, subject: str, payload: bytes, reply: str, headers: dict[str, str]) -> None:
        self.sent.append((subject, headers["Nats-Msg-Id"], reply))


async def started(ack_timeout: float = 0.05) -> tuple[OrderedPublisher, RecordingClient]:
    client = RecordingClient()
    bus = Bus(nc=cast("Any", client), js=cast("Any", None), name="test")
    publisher = OrderedPublisher(bus, ack_timeout=ack_timeout)
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


async def test_lost_messages_are_resent_newest_per_subject_only() -> None:
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
    ack(publisher, replies["c1"])  # a1, a2 and b1 are lost
    await until(lambda: publisher.recoveries >= 1 and publisher.in_flight == 2, within=5, what="recovery")
    resent = [msg_id for _, msg_id, _ in client.sent[4:]]
    assert resent == ["a2", "b1"]  # a1 is superseded by a2: re-sending it could store it after a2
    for _, _, reply in client.sent[4:]:
        ack(publisher, reply)
    async with asyncio.timeout(1):
        await publisher.flush()
    await publisher.close()


async def test_an_older_message_is_never_resent_once_a_newer_one_is_stored() -> None:
    publisher, client = await started()
    await publisher.publish_batch(
        [("s.a", b"", "a1", None), ("s.a", b"", "a2", None), ("s.b", b"", "b1", None)]
    )
    replies = {msg_id: reply for _, msg_id, reply in client.sent}
    ack(publisher, replies["a2"])  # a1 lost, but a2 (newer, same object) is stored
    await until(lambda: publisher.recoveries >= 1 and publisher.in_flight == 1, within=5, what="recovery")
    assert [msg_id for _, msg_id, _ in client.sent[3:]] == ["b1"]
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
    sending = asyncio.create_task(publisher.publish_batch([("s.x", b"", f"x{i}", None) for i in range(3)]))
    await until(lambda: len(client.sent) == 2, within=2, what="window filled")
    assert not sending.done()
    ack(publisher, client.sent[0][2])
    async with asyncio.timeout(1):
        await sending
    assert [m for _, m, _ in client.sent] == ["x0", "x1", "x2"]
    await publisher.close()


async def test_a_gap_in_the_acks_is_recovered_without_waiting_for_the_ack_timeout() -> None:
    publisher, client = await started(ack_timeout=60)
    await publisher.publish_batch([("s.a", b"", "a1", None), ("s.b", b"", "b1", None)])
    ack(publisher, client.sent[1][2])  # b1 stored: a1, sent before it, will never be acknowledged
    await until(lambda: len(client.sent) == 3, within=30, what="a1 re-sent")
    assert client.sent[2][1] == "a1"
    await publisher.close()
