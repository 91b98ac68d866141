"""Envelope contract: schema versions, unknown fields, deterministic ids."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from corral_model.codec import SchemaError, decode, encode
from corral_model.envelopes import (
    Command,
    CommandResult,
    EventType,
    FieldValue,
    ObjectEvent,
    Outcome,
    Target,
    Verb,
    new_command,
)
from corral_model.longhorn import ObjectMeta, Volume, VolumeSpec, engine_image_name
from corral_model.subjects import escape_token, object_subject, unescape_token


def _event() -> ObjectEvent[Volume]:
    volume = Volume(
        metadata=ObjectMeta(name="pvc-1", namespace="longhorn-system", uid="u1", resource_version="7"),
        spec=VolumeSpec(image="longhorn-engine:old"),
    )
    return ObjectEvent[Volume](
        type=EventType.MODIFIED,
        kind="volume",
        namespace="longhorn-system",
        name="pvc-1",
        uid="u1",
        resource_version="7",
        object=volume,
    )


def test_event_round_trip_is_typed() -> None:
    event = _event()
    decoded = decode(encode(event), ObjectEvent[Volume])
    assert decoded == event
    assert decoded.object is not None and decoded.object.spec.image == "longhorn-engine:old"
    assert decoded.event_id == "volume:u1:7"


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    payload = msgspec.json.decode(encode(_event()))
    payload["addedInV1_3"] = {"anything": True}
    payload["object"]["spec"]["fieldFromTheFuture"] = 1
    decoded = decode(msgspec.json.encode(payload), ObjectEvent[Volume])
    assert decoded.name == "pvc-1"


def test_minor_version_is_read_major_version_is_refused() -> None:
    payload = msgspec.json.decode(encode(_event()))
    payload["schema"] = "corral.event/v1.4"
    assert decode(msgspec.json.encode(payload), ObjectEvent[Any]).name == "pvc-1"
    payload["schema"] = "corral.event/v2"
    with pytest.raises(SchemaError, match=r"unsupported schema version 'corral\.event/v2'"):
        decode(msgspec.json.encode(payload), ObjectEvent[Any])


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not json", "not a JSON object"),
        (b'{"id": "x"}', "missing schema"),
        (b'{"schema": "corral.result/v1"}', "is not a corral.command message"),
        (b'{"schema": "corral.command/v1", "id": 3}', "invalid corral.command message"),
    ],
)
def test_bad_commands_are_schema_errors(data: bytes, message: str) -> None:
    with pytest.raises(SchemaError, match=message):
        decode(data, Command)


def test_command_id_is_deterministic_and_depends_on_intent_and_precondition() -> None:
    target = Target(kind="Volume", namespace="ns", name="v")

    def make(image: str, expected: str) -> Command:
        return new_command(
            service="engine-upgrade",
            verb=Verb.PATCH,
            target=target,
            changes=(FieldValue(path="/spec/image", value=image),),
            preconditions=(FieldValue(path="/spec/image", value=expected),),
            reason="r",
            created_at=1.0,
        )

    assert make("b", "a").id == make("b", "a").id
    assert make("b", "a").id != make("c", "a").id
    assert make("b", "a").id != make("b", "z").id
    assert decode(encode(make("b", "a")), Command) == make("b", "a")


def test_result_round_trip() -> None:
    result = CommandResult(
        command_id="c1",
        service="actuator",
        target=Target(kind="Volume", namespace="n", name="v"),
        outcome=Outcome.PRECONDITION_FAILED,
        detail="test failed at /spec/image",
    )
    assert decode(encode(result), CommandResult) == result


def test_subject_tokens_escape_dots_reversibly() -> None:
    for name in ["plain", "ip-10-0-0-1.ec2.internal", "a%2Eb", "", "x*y>z"]:
        token = escape_token(name)
        assert "." not in token and "*" not in token and ">" not in token
        assert unescape_token(token) == name
    subject = object_subject("node", "longhorn-system", "n1.example")
    assert subject == "lh.obj.node.longhorn-system.n1%2Eexample"


def test_engine_image_name_matches_longhorn() -> None:
    # Examples from longhorn-behaviour.md §1.1.
    assert engine_image_name("longhorn-engine:latest") == "ei-1752c2c7"
    assert engine_image_name(" longhorn-engine:upgraded ") == "ei-0704a3b1"


def test_an_unreadable_marker_has_its_own_id_and_no_object() -> None:
    marker = ObjectEvent[Volume](
        type=EventType.UNREADABLE,
        kind="volume",
        namespace="longhorn-system",
        name="pvc-1",
        uid="u1",
        resource_version="7",
        reason="Expected `object`, got `null` - at `$.status`",
    )
    decoded = decode(encode(marker), ObjectEvent[Volume])
    assert decoded == marker and decoded.object is None
    assert decoded.event_id == "volume:u1:7:unreadable"  # not the id of the version's MODIFIED


def test_the_lease_term_travels_but_stays_out_of_the_command_id() -> None:
    """A decision republished by the next leader (a newer term) is the same decision: same id, so
    JetStream still drops it as a duplicate; the term itself survives the round trip."""
    target = Target(kind="Volume", namespace="ns", name="v")

    def make(term: int) -> Command:
        return new_command(
            service="engine-upgrade",
            verb=Verb.PATCH,
            target=target,
            changes=(FieldValue(path="/spec/image", value="b"),),
            term=term,
        )

    assert make(3).id == make(7).id
    assert decode(encode(make(7)), Command).term == 7
    assert b'"term":7' in encode(make(7))
    # An older producer's command (no term) decodes as unfenced.
    assert decode(encode(make(7)).replace(b',"term":7', b""), Command).term == 0


def test_the_schema_is_checked_however_the_payload_begins() -> None:
    """corral's own payloads start with the expected schema and skip a separate look at it; any
    other start, or the field given again later with another version, is checked as ever."""
    encoded = encode(_event())
    assert encoded.startswith(b'{"schema":"corral.event/v1",')
    body = encoded[len(b'{"schema":"corral.event/v1",') :]
    assert decode(b'{"schema":"corral.event/v1.2",' + body, ObjectEvent[Volume]).name == "pvc-1"
    assert decode(b'{"name":"pvc-1","schema":"corral.event/v1",' + body, ObjectEvent[Volume]).uid == "u1"
    with pytest.raises(SchemaError, match="unsupported schema version"):
        decode(encoded[:-1] + b',"schema":"corral.event/v2"}', ObjectEvent[Volume])
    with pytest.raises(SchemaError, match=r"is not a corral\.command message"):
        decode(encoded, Command)


def _with_invalid_utf8(encoded: bytes, inside: bytes) -> bytes:
    assert inside in encoded
    return encoded.replace(inside, inside[:1] + b"\xff" + inside[2:], 1)


@pytest.mark.parametrize(
    ("payload", "type_"),
    [
        (_with_invalid_utf8(encode(_event()), b"pvc-1"), ObjectEvent[Volume]),
        (_with_invalid_utf8(encode(_event()), b"longhorn-engine:old"), ObjectEvent[Volume]),
        (
            _with_invalid_utf8(
                encode(
                    new_command(
                        service="engine-upgrade",
                        target=Target(kind="Volume", namespace="longhorn-system", name="pvc-1"),
                        verb=Verb.PATCH,
                        changes=(FieldValue(path="/spec/image", value="new"),),
                    )
                ),
                b"pvc-1",
            ),
            Command,
        ),
        (b'{"schema":"corral.command/v1","service":"\xc3\x28"}', Command),
        (b'{"\xff":1}', Command),
    ],
    ids=["event-name", "event-object-field", "command", "two-byte", "key-no-schema"],
)
def test_invalid_utf8_anywhere_is_a_schema_error(payload: bytes, type_: Any) -> None:
    """UnicodeDecodeError is not msgspec's DecodeError; every reader handles SchemaError only."""
    with pytest.raises(SchemaError, match=r"UnicodeDecodeError|invalid|not a JSON object|schema"):
        decode(payload, type_)


def test_deep_nesting_is_a_schema_error() -> None:
    with pytest.raises(SchemaError):
        decode(b'{"schema":"corral.command/v1","body":' + b"[" * 100_000 + b"]" * 100_000 + b"}", Command)
