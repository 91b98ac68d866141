"""Parking a message that cannot be handled in LH_DEAD, with the reason, before acking it.

A dead letter is published and acknowledged by the stream before the original is acked, so a
crash in between delivers the original again rather than losing it; the dead letter's
`Nats-Msg-Id` is derived from the original's stream and sequence, so that redelivery (or two
replicas reporting the same message) stores it once.

A dead letter must always fit in one NATS message. The original may be as large as the server
allows (max_payload, 1 MB by default), and the letter wraps it in JSON (base64 for binary: 4/3 of
the size) plus its headers, so a large original would make an unpublishable letter: never parked,
never acked, and in a work queue (LH_COMMANDS) there for ever, failing on every delivery. So a
letter keeps at most the first MAX_KEPT_PAYLOAD bytes of the payload (and short header values),
marks itself `truncated`, and always records the original's size and SHA-256, enough to tell what
it was and to match it against a copy kept elsewhere.
"""

from __future__ import annotations

import base64
import enum
import hashlib
from collections.abc import Mapping

from nats.js import JetStreamContext

from corral_bus.streams import MSG_ID_HEADER
from corral_model import codec, subjects
from corral_model.envelopes import DeadLetter

# Headers that must not be copied into the dead letter's own headers (they'd act on LH_DEAD).
_CONTROL_HEADERS = {"Nats-Msg-Id", "Nats-TTL", "Nats-Rollup", "Nats-Expected-Stream"}

# What a letter keeps of the original: far below any max_payload a JetStream server is run with
# (default 1 MB), and enough to read what a malformed message was.
MAX_KEPT_PAYLOAD = 64 * 1024
MAX_KEPT_HEADERS = 32
MAX_KEPT_HEADER_VALUE = 1024


class DeadReason(enum.StrEnum):
    """The class of a dead letter, the last token of its subject in LH_DEAD."""

    UNDECODABLE = "undecodable"
    PERMANENT = "permanent"
    MAX_DELIVERIES = "max-deliveries"


def dead_letter(
    *,
    reason_class: DeadReason,
    reason: str,
    stream: str,
    subject: str,
    consumer: str,
    deliveries: int,
    headers: Mapping[str, str] | None,
    data: bytes,
    keep: int = MAX_KEPT_PAYLOAD,
) -> DeadLetter:
    """The letter for one message; at most `keep` bytes of its payload (see the module docstring)."""
    kept_headers, headers_cut = _kept_headers(headers or {})
    payload_cut = len(data) > keep
    text, b64 = _as_text(data[:keep] if payload_cut else data, payload_cut)
    return DeadLetter(
        reason=f"{reason_class}: {reason}",
        stream=stream,
        subject=subject,
        consumer=consumer,
        deliveries=deliveries,
        headers=kept_headers,
        payload=text,
        payload_b64=b64,
        payload_size=len(data),
        payload_sha256=hashlib.sha256(data).hexdigest(),
        truncated=payload_cut or headers_cut,
    )


def _as_text(data: bytes, cut: bool) -> tuple[str, str]:
    """(text, "") when `data` is UTF-8, else ("", base64). A cut may split the last character: up to
    three bytes are dropped to find a boundary before giving up on text."""
    for drop in range(4 if cut else 1):
        try:
            return data[: len(data) - drop].decode("utf-8"), ""
        except UnicodeDecodeError:
            continue
    return "", base64.b64encode(data).decode("ascii")


def _kept_headers(headers: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    kept: dict[str, str] = {}
    cut = len(headers) > MAX_KEPT_HEADERS
    for name, value in list(headers.items())[:MAX_KEPT_HEADERS]:
        if len(value) > MAX_KEPT_HEADER_VALUE:
            value, cut = value[:MAX_KEPT_HEADER_VALUE], True
        kept[name] = value
    return kept, cut


async def publish_dead_letter(
    js: JetStreamContext,
    letter: DeadLetter,
    reason_class: DeadReason,
    stream_seq: int,
    *,
    msg_id: str = "",
) -> None:
    """Store `letter` in LH_DEAD and wait for the stream's ack (raises if it was not stored).

    `msg_id`: the dedup id when the original is no stream message (the watcher's dead letters are
    Kubernetes objects: kind, uid and resourceVersion name them)."""
    msg_id = msg_id or (f"dead:{letter.stream}:{stream_seq}" if stream_seq else "")
    headers = {k: v for k, v in letter.headers.items() if k not in _CONTROL_HEADERS}
    if msg_id:
        headers[MSG_ID_HEADER] = msg_id
    await js.publish(
        subjects.dead_subject(letter.stream or "unknown", reason_class.value),
        codec.encode(letter),
        headers=headers or None,
    )
