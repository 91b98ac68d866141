"""NATS protocol frames for a publish (`PUB` / `HPUB`), built in one formatting step.

nats-py's `publish` validates and re-encodes every header on every call; at the rates corral
publishes that is half the client's cost of a message. Our headers are few and mostly one
(`Nats-Msg-Id`), so the pipelined publisher (`corral_bus.acks`) builds the whole frame here, with
the checks that keep a frame well formed (no whitespace in a subject, header names as the protocol
allows them, no line breaks smuggled in through a value or id), and hands it to the client's buffer.
Pure: no I/O, no client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from nats.errors import BadSubjectError

from corral_bus.streams import EXPECTED_LAST_SUBJECT_SEQ_HEADER, MSG_ID_HEADER

_HEADER_LINE = b"NATS/1.0\r\n"
_BAD_SUBJECT = re.compile(r"[ \t\r\n]")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_valid_names: set[str] = set()
_ID_ONLY = len(b"NATS/1.0\r\nNats-Msg-Id: \r\n\r\n")
_ID_AND_EXPECT = len(b"NATS/1.0\r\nNats-Msg-Id: \r\nNats-Expected-Last-Subject-Sequence: \r\n\r\n")


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """The `NATS/1.0` header block; refuses invalid names, turns line breaks in values into spaces."""
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


def check(subject: str, msg_id: str) -> None:
    """Refuse what would break a frame: whitespace in a subject, a line break in a message id.
    For untrusted input; the watcher's subjects and ids are escaped by corral itself."""
    if not subject or _BAD_SUBJECT.search(subject):
        raise BadSubjectError
    if "\r" in msg_id or "\n" in msg_id:
        raise ValueError(f"invalid message id {msg_id!r}")


def frame(
    subject: str,
    reply: bytes,
    msg_id: str,
    headers: Mapping[str, str] | None,
    payload: bytes,
    expect: int = -1,
) -> bytes:
    """One publish of `payload` to `subject` asking for the answer on `reply`, carrying
    `Nats-Msg-Id: msg_id` (unless empty) and `headers`; with `expect` ≥ 0, also
    `Nats-Expected-Last-Subject-Sequence: expect` (the stream refuses the message unless the
    subject's last stored message has that sequence, 0 for none). `subject` and `msg_id` as
    `check` passes them (not checked again here: this runs once per message on the watcher's hot
    path)."""
    if expect >= 0:
        if headers is None and msg_id:
            # The watcher's common case, in one formatting step like the one below.
            encoded_id = msg_id.encode()
            sequence = b"%d" % expect
            size = _ID_AND_EXPECT + len(encoded_id) + len(sequence)
            return (
                b"HPUB %b %b %d %d\r\nNATS/1.0\r\nNats-Msg-Id: %b\r\n"
                b"Nats-Expected-Last-Subject-Sequence: %b\r\n\r\n%b\r\n"
                % (subject.encode(), reply, size, size + len(payload), encoded_id, sequence, payload)
            )
        headers = {**(headers or {}), EXPECTED_LAST_SUBJECT_SEQ_HEADER: str(expect)}
    if headers is None and msg_id:
        # The common case in one formatting step: only the message id as header.
        encoded_id = msg_id.encode()
        size = _ID_ONLY + len(encoded_id)
        return b"HPUB %b %b %d %d\r\nNATS/1.0\r\nNats-Msg-Id: %b\r\n\r\n%b\r\n" % (
            subject.encode(),
            reply,
            size,
            size + len(payload),
            encoded_id,
            payload,
        )
    if msg_id:
        headers = {MSG_ID_HEADER: msg_id, **(headers or {})}
    if not headers:
        return b"PUB %b %b %d\r\n%b\r\n" % (subject.encode(), reply, len(payload), payload)
    block = encode_headers(headers)
    return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
        subject.encode(),
        reply,
        len(block),
        len(block) + len(payload),
        block,
        payload,
    )
