"""Parking a message that cannot be handled in LH_DEAD, with the reason, before acking it.

A dead letter is published and acknowledged by the stream before the original is acked, so a
crash in between delivers the original again rather than losing it; the dead letter's
`Nats-Msg-Id` is derived from the original's stream and sequence, so that redelivery (or two
replicas reporting the same message) stores it once.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping

from nats.js import JetStreamContext

from corral_bus.streams import MSG_ID_HEADER
from corral_model import codec, subjects
from corral_model.envelopes import DeadLetter

# Headers that must not be copied into the dead letter's own headers (they'd act on LH_DEAD).
_CONTROL_HEADERS = {"Nats-Msg-Id", "Nats-TTL", "Nats-Rollup", "Nats-Expected-Stream"}


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
) -> DeadLetter:
    try:
        text, b64 = data.decode("utf-8"), ""
    except UnicodeDecodeError:
        text, b64 = "", base64.b64encode(data).decode("ascii")
    return DeadLetter(
        reason=f"{reason_class}: {reason}",
        stream=stream,
        subject=subject,
        consumer=consumer,
        deliveries=deliveries,
        headers=dict(headers or {}),
        payload=text,
        payload_b64=b64,
    )


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
