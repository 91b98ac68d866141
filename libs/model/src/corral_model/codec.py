"""Encoding and schema-checked decoding of the envelopes.

Decoders are built once (msgspec decoders are reusable and fast). `decode` first peeks at the schema
string, so an unknown major version fails with a message that names it, not a confusing type error.
"""

from __future__ import annotations

from typing import Any, TypeVar, get_origin

import msgspec

from corral_model.envelopes import (
    COMMAND_SCHEMA,
    EVENT_SCHEMA,
    RESULT_SCHEMA,
    Command,
    CommandResult,
    DeadLetter,
    ObjectEvent,
)

T = TypeVar("T")


class SchemaError(ValueError):
    """A payload that is not a message corral understands: never retried, goes to LH_DEAD."""


class _SchemaPeek(msgspec.Struct):
    schema: str = ""


_peek = msgspec.json.Decoder(_SchemaPeek)
_encoder = msgspec.json.Encoder()
_SCHEMAS: dict[type[Any], str] = {
    ObjectEvent: EVENT_SCHEMA,
    Command: COMMAND_SCHEMA,
    CommandResult: RESULT_SCHEMA,
    DeadLetter: "corral.dead/v1",
}
_decoders: dict[Any, msgspec.json.Decoder[Any]] = {}


def _decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    decoder = _decoders.get(type_)
    if decoder is None:
        decoder = _decoders[type_] = msgspec.json.Decoder(type_)
    return decoder


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def _major(schema: str) -> tuple[str, str]:
    name, _, version = schema.partition("/")
    return name, version.split(".", 1)[0]


def decode(data: bytes, type_: type[T]) -> T:
    """Decode `data` as `type_` (e.g. `Command`, `ObjectEvent[Volume]`), refusing other envelopes
    and unknown major versions."""
    expected = _SCHEMAS[get_origin(type_) or type_]
    try:
        schema = _peek.decode(data).schema
    except msgspec.DecodeError as e:
        raise SchemaError(f"not a JSON object: {e}") from e
    if not schema:
        raise SchemaError(f"missing schema field; expected {expected}")
    name, major = _major(schema)
    want_name, want_major = _major(expected)
    if name != want_name:
        raise SchemaError(f"schema {schema!r} is not a {want_name} message")
    if major != want_major:
        raise SchemaError(f"unsupported schema version {schema!r}; this build reads {expected}")
    try:
        result: T = _decoder(type_).decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise SchemaError(f"invalid {want_name} message: {e}") from e
    return result
