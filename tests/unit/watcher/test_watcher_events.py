"""Bus messages of the watcher: ids, subjects, tombstone headers, and the HPUB frames of the fast path."""

from __future__ import annotations

import msgspec

from corral_bus import tombstone_headers
from corral_bus.framing import encode_headers, frame
from corral_model.codec import decode
from corral_model.envelopes import EventType, ObjectEvent, event_id
from corral_model.longhorn import ObjectMeta, Volume
from corral_model.subjects import object_subject, resync_subject
from corral_watcher.events import EventEncoder

VOLUME = Volume(
    metadata=ObjectMeta(name="pvc.1", namespace="longhorn-system", uid="u-1", resource_version="42")
)


def test_object_message_uses_the_model_event_id_and_subject() -> None:
    encoder = EventEncoder("volume", tombstone_ttl=60)
    for type_ in (EventType.ADDED, EventType.MODIFIED):
        subject, payload, msg_id, headers = encoder.object_message(type_, VOLUME, 1.5)
        assert subject == object_subject("volume", "longhorn-system", "pvc.1")
        assert msg_id == event_id(type_, "volume", "longhorn-system", "pvc.1", "u-1", "42")
        assert headers is None
        event = decode(payload, ObjectEvent[Volume])
        assert event.type is type_ and event.object == VOLUME and event.observed_at == 1.5
        assert event.event_id == msg_id


def test_a_tombstone_rolls_up_expires_and_may_carry_the_list_version() -> None:
    encoder = EventEncoder("volume", tombstone_ttl=60)
    subject, payload, msg_id, headers = encoder.object_message(EventType.DELETED, VOLUME, 1.0, "50")
    assert subject == object_subject("volume", "longhorn-system", "pvc.1")
    assert headers == tombstone_headers(60)
    assert msg_id == event_id(EventType.DELETED, "volume", "longhorn-system", "pvc.1", "u-1", "50")
    event = decode(payload, ObjectEvent[Volume])
    assert event.type is EventType.DELETED and event.resource_version == "50" and event.object == VOLUME


def test_resynced_marker_goes_to_the_kind_subject() -> None:
    subject, payload, msg_id, headers = EventEncoder("volume", 60).resynced_message("longhorn-system", "77")
    assert headers is None
    assert subject == resync_subject("volume", "longhorn-system")
    event = decode(payload, ObjectEvent[Volume])
    assert event.type is EventType.RESYNCED and event.object is None
    assert msg_id == event.event_id


def _parse(data: bytes) -> tuple[list[bytes], bytes, bytes]:
    """Split an HPUB frame the way a server does: control line, header block, payload."""
    line, _, rest = data.partition(b"\r\n")
    parts = line.split(b" ")
    header_size, total = int(parts[3]), int(parts[4])
    assert rest[total:] == b"\r\n"
    return parts, rest[:header_size], rest[header_size:total]


def test_frames_are_valid_hpub_with_the_message_id() -> None:
    payload = msgspec.json.encode({"x": "é" * 10})
    parts, headers, body = _parse(frame("lh.obj.volume.ns.a", b"_INBOX.x.7", "volume:u:1", None, payload))
    assert parts[:3] == [b"HPUB", b"lh.obj.volume.ns.a", b"_INBOX.x.7"]
    assert headers == encode_headers({"Nats-Msg-Id": "volume:u:1"})
    assert body == payload
    parts, headers, body = _parse(frame("s", b"r", "id", tombstone_headers(60), payload))
    assert headers == encode_headers({"Nats-Msg-Id": "id", **tombstone_headers(60)})
    assert b"Nats-TTL: 60s\r\n" in headers
    assert body == payload
