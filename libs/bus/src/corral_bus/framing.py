"""Writing a publish straight into the client's send buffer, for the pipelined publisher's hot path.

`nats.aio.client.Client.publish` validates and re-encodes every header on every call; at the rates
the watcher publishes (tens of thousands of events a second, on a small share of a CPU) that is
half the client's cost of a message. Our headers are few and known, so the frame is built in one
formatting step and handed to the client's own buffer and flusher, which keeps reconnect buffering
and ordering exactly as `publish` would. If a future nats-py moves those internals, `fast_path`
says no and the publisher falls back to `publish`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nats.aio.client import Client as NATS
from nats.errors import (
    BadSubjectError,
    ConnectionClosedError,
    ConnectionDrainingError,
    MaxPayloadError,
    OutboundBufferLimitError,
)

_HEADER_LINE = b"NATS/1.0\r\n"
_BAD_SUBJECT = re.compile(r"[ \t\r\n]")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_valid_names: set[str] = set()


def fast_path(nc: NATS) -> bool:
    return all(hasattr(nc, a) for a in ("_send_command", "_flush_pending", "_flush_queue", "_max_payload"))


def encode_headers(headers: Mapping[str, str]) -> bytes:
    lines = [_HEADER_LINE]
    for key, value in headers.items():
        if key not in _valid_names:
            if not _HEADER_NAME.fullmatch(key):
                raise ValueError(f"invalid header name {key!r}")
            _valid_names.add(key)
        if "\r" in value or "\n" in value:
            value = value.replace("\r", " ").replace("\n", " ")
        lines.append(f"{key}: {value.strip()}\r\n".encode())
    lines.append(b"\r\n")
    return b"".join(lines)


def frame(subject: str, reply: str, headers: bytes | None, payload: bytes) -> bytes:
    if not subject or _BAD_SUBJECT.search(subject):
        raise BadSubjectError
    if headers is None:
        return b"PUB %b %b %d\r\n%b\r\n" % (subject.encode(), reply.encode(), len(payload), payload)
    return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
        subject.encode(),
        reply.encode(),
        len(headers),
        len(headers) + len(payload),
        headers,
        payload,
    )


async def send(nc: NATS, data: bytes, payload_size: int) -> None:
    """What `Client.publish` does after validation: buffer, and wake the flusher if it sleeps."""
    if nc.is_closed:
        raise ConnectionClosedError
    if nc.is_draining_pubs:
        raise ConnectionDrainingError
    if payload_size > nc._max_payload:
        raise MaxPayloadError
    if not nc.is_connected and (
        nc._max_pending_size <= 0 or len(data) + nc._pending_data_size > nc._max_pending_size
    ):
        raise OutboundBufferLimitError
    nc.stats["out_msgs"] += 1
    nc.stats["out_bytes"] += payload_size
    await nc._send_command(data)
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()
