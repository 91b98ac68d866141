"""Read a stream's messages on some subjects in batches, without a consumer (batched direct get).

A work queue (LH_COMMANDS) allows no second consumer whose subjects overlap the actuator's, so a
decision service reads its own queued commands by message get. One request per message made a
takeover's scan cost a round trip per queued command; a batched direct get (`$JS.API.DIRECT.GET.
<stream>` with `batch`, NATS 2.11+) answers up to `batch` messages to one request, then an end-of-
batch status (204 EOB) saying how many more match. The stream must allow direct gets
(`allow_direct`, set by the contract for LH_COMMANDS); where it does not (a stream set up before),
`DirectGetUnavailable` tells the caller to fall back to single gets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from nats.aio.msg import Msg

from corral_bus.connection import Bus
from corral_bus.errors import BusError

_STATUS = "Status"
_NO_RESPONDERS = "503"
_END_OF_BATCH = "204"
_NOT_FOUND = "404"


class DirectGetUnavailable(BusError):
    """The stream does not answer direct gets (allow_direct off, or an old server)."""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    subject: str
    seq: int
    data: bytes


async def _one_batch(
    bus: Bus, stream: str, subject_filter: str, start: int, batch: int, reply_wait_s: float
) -> tuple[list[StoredMessage], int]:
    """Up to `batch` messages from sequence `start` on, and how many more match after them."""
    replies: asyncio.Queue[Msg] = asyncio.Queue()

    async def collect(msg: Msg) -> None:
        replies.put_nowait(msg)

    inbox = bus.nc.new_inbox()
    subscription = await bus.nc.subscribe(inbox, cb=collect)
    try:
        request = {"seq": start, "next_by_subj": subject_filter, "batch": batch}
        await bus.nc.publish(f"$JS.API.DIRECT.GET.{stream}", json.dumps(request).encode(), reply=inbox)
        found: list[StoredMessage] = []
        async with asyncio.timeout(reply_wait_s):
            while True:
                msg = await replies.get()
                headers = msg.headers or {}
                status = headers.get(_STATUS)
                if status is None:
                    found.append(
                        StoredMessage(
                            headers.get("Nats-Subject", ""), int(headers["Nats-Sequence"]), msg.data
                        )
                    )
                    continue
                if status == _END_OF_BATCH:
                    return found, int(headers.get("Nats-Num-Pending", 0))
                if status == _NOT_FOUND:
                    return found, 0
                if status == _NO_RESPONDERS:
                    raise DirectGetUnavailable(f"{stream} answers no direct get (allow_direct off?)")
                raise BusError(f"direct get on {stream}: status {status} {headers.get('Description', '')}")
    finally:
        await subscription.unsubscribe()


async def read_batches(
    bus: Bus, stream: str, subject_filter: str, *, batch: int = 256, reply_wait_s: float = 5.0
) -> AsyncIterator[list[StoredMessage]]:
    """Every message of `stream` on `subject_filter`, oldest first, `batch` per round trip."""
    start = 1
    while True:
        found, more = await _one_batch(bus, stream, subject_filter, start, batch, reply_wait_s)
        if found:
            yield found
            start = found[-1].seq + 1
        if not found or not more:
            return
