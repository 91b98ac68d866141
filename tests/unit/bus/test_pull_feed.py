"""PullFeed's bookkeeping of what it asked for, driven by the status messages JetStream sends."""

from __future__ import annotations

import pytest
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from corral_bus.connection import Bus
from corral_bus.pull import PullFeed, delivery_position, parse_headers


def _feed(batch: int = 10) -> PullFeed:
    nc = NATS()  # never connected: the bookkeeping under test does no I/O
    return PullFeed(Bus(nc=nc, js=nc.jetstream(), name="unit"), "S", "c", batch=batch)


def _status(code: str, description: str, pending: int | None = None) -> Msg:
    headers = {"Status": code, "Description": description}
    if pending is not None:
        headers["Nats-Pending-Messages"] = str(pending)
    return Msg(_client=NATS(), subject="_INBOX.x", headers=headers)


def _message(n: int) -> Msg:
    return Msg(_client=NATS(), subject="lh.cmd.a", reply=f"$JS.ACK.S.c.1.{n}.{n}.0.0", data=b"x")


async def test_messages_and_expiry_account_for_the_request() -> None:
    feed = _feed()
    feed._outstanding = 10  # as after one request for 10
    for n in range(1, 4):
        await feed._on_msg(_message(n))
    assert feed.outstanding == 7
    assert [m.reply.split(".")[5] for m in feed.give_back()] == ["1", "2", "3"]
    await feed._on_msg(_status("408", "Request Timeout", pending=7))
    assert feed.outstanding == 0


async def test_heartbeats_keep_the_pull_alive_without_changing_the_count() -> None:
    feed = _feed()
    feed._outstanding = 10
    feed._last_activity = feed._requested_at = 0.0  # long quiet
    assert feed.stale
    await feed._on_msg(_status("100", "Idle Heartbeat"))
    assert not feed.stale
    assert feed.outstanding == 10


async def test_consumer_deleted_is_noticed() -> None:
    feed = _feed()
    feed._outstanding = 5
    await feed._on_msg(_status("409", "Consumer Deleted"))
    assert feed.consumer_deleted
    assert feed.outstanding == 0


async def test_counts_never_go_negative() -> None:
    feed = _feed()
    await feed._on_msg(_status("408", "Request Timeout", pending=50))
    assert feed.outstanding == 0


async def test_stragglers_after_a_reset_do_not_drive_the_count_below_zero() -> None:
    feed = _feed(batch=4)
    feed._outstanding = 4
    feed.reset()
    await feed._on_msg(_message(1))
    assert feed.outstanding == 0
    assert len(feed.give_back()) == 1  # still handed out, not dropped


async def test_a_refused_request_is_forgotten_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    feed = _feed()
    feed._outstanding = 10
    await feed._on_msg(_status("409", "Exceeded MaxRequestBatch of 5"))
    assert feed.outstanding == 0
    assert "refused: 409 Exceeded MaxRequestBatch" in caplog.text


def _raw_feed(batch: int = 10) -> PullFeed:
    nc = NATS()
    return PullFeed(Bus(nc=nc, js=nc.jetstream(), name="unit"), "S", "c", batch=batch, raw=True)


async def test_a_raw_feed_takes_deliveries_from_the_parser_and_declines_statuses() -> None:
    feed = _raw_feed()
    feed._outstanding = 10
    block = b"NATS/1.0\r\nNats-Msg-Id: volume:u1:7\r\ntraceparent: 00-ab-cd-01\r\n\r\n"
    assert feed._on_raw(b"lh.obj.volume.ns.a", b"$JS.ACK.S.c.1.41.41.0.3", b"{}", block)
    assert feed._on_raw(b"lh.obj.volume.ns.b", b"$JS.ACK.S.c.1.42.42.0.2", b"{}", None)
    heartbeat = b"NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\n\r\n"
    assert not feed._on_raw(b"_INBOX.x", b"", b"", heartbeat)  # goes to nats-py, then _on_msg
    assert feed.outstanding == 8
    first, second = await feed.take(0.0)
    assert (first.subject, first.data) == ("lh.obj.volume.ns.a", b"{}")
    assert dict(first.headers) == {"Nats-Msg-Id": "volume:u1:7", "traceparent": "00-ab-cd-01"}
    assert "traceparent" in first.headers and not second.headers
    assert delivery_position(first.reply) == (41, 3)
    assert await feed.take(0.0) == []


def test_header_blocks_parse_as_nats_py_keeps_them() -> None:
    block = b"NATS/1.0\r\nA: 1\r\nB:  two words \r\nA: again\r\nbroken line\r\n\r\n"
    assert parse_headers(block) == {"A": "1", "B": "two words"}
    assert delivery_position("$JS.ACK.domain.hash.S.c.2.9.8.1700000000.5.token") == (9, 5)
