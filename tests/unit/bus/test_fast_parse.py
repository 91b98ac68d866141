"""The router's fast parser reads what nats-py's parser reads, in the same order, however the server's
bytes are cut into reads: MSG and HMSG frames with and without a reply subject, and the operations it
leaves to nats-py (PING, PONG, +OK, INFO, -ERR) between them (natsinternals._fast_parse)."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.protocol.parser import Parser

from corral_bus import natsinternals


class _Client:
    """What the parser calls back, recorded in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []
        self._ps = Parser(self)

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        assert all(type(v) is bytes for v in (subject, reply, data))
        self.seen.append(("msg", sid, subject, reply, data, headers))

    async def _process_ping(self) -> None:
        self.seen.append(("ping",))

    async def _process_pong(self) -> None:
        self.seen.append(("pong",))

    async def _process_info(self, info: dict[str, Any]) -> None:
        self.seen.append(("info", info))

    async def _process_err(self, err: str) -> None:
        self.seen.append(("err", err))


def _msg(subject: str, sid: int, reply: str, payload: bytes) -> bytes:
    line = f"MSG {subject} {sid} {reply + ' ' if reply else ''}{len(payload)}\r\n".encode()
    return line + payload + b"\r\n"


def _hmsg(subject: str, sid: int, reply: str, headers: bytes, payload: bytes) -> bytes:
    sizes = f"{len(headers)} {len(headers) + len(payload)}"
    line = f"HMSG {subject} {sid} {reply + ' ' if reply else ''}{sizes}\r\n".encode()
    return line + headers + payload + b"\r\n"


subjects = st.sampled_from(["lh.obj.volume.longhorn-system.pvc-1", "_INBOX.abc.1", "a"])
replies = st.sampled_from(["", "$JS.ACK.LH_OBJECTS.c.1.42.42.1700000000000000000.0", "_INBOX.x"])
payloads = st.binary(max_size=300).filter(lambda b: True)
header_blocks = st.sampled_from(
    [
        b"NATS/1.0\r\nNats-Msg-Id: volume:1:2\r\n\r\n",
        b"NATS/1.0 100 Idle Heartbeat\r\n\r\n",
        b"NATS/1.0\r\n\r\n",
    ]
)
frames = st.one_of(
    st.builds(_msg, subjects, st.integers(1, 99), replies, payloads),
    st.builds(_hmsg, subjects, st.integers(1, 99), replies, header_blocks, payloads),
    st.sampled_from(
        [
            b"PING\r\n",
            b"PONG\r\n",
            b"+OK\r\n",
            b'INFO {"server_id":"x","max_payload":1048576}\r\n',
            b"-ERR 'x'\r\n",
        ]
    ),
)


async def _read(stream: bytes, cuts: list[int], fast: bool) -> list[tuple[Any, ...]]:
    client = _Client()
    parse = natsinternals._fast_parse(client) if fast else client._ps.parse  # type: ignore[arg-type]
    start = 0
    for cut in [*sorted(cuts), len(stream)]:
        await parse(stream[start:cut])
        start = max(start, cut)
    return client.seen


@settings(max_examples=300, deadline=None)
@given(st.lists(frames, min_size=1, max_size=30), st.data())
def test_the_fast_parser_reads_what_nats_py_reads(chosen: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(chosen)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=12))
    expected = asyncio.run(_read(stream, cuts, fast=False))
    assert asyncio.run(_read(stream, cuts, fast=True)) == expected
    assert len([s for s in expected if s[0] == "msg"]) == sum(
        1 for f in chosen if f[:4] in (b"MSG ", b"HMSG")
    )
