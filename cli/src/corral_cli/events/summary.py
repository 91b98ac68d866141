"""One human-readable line per bus message, for `corral events tail`: time, stream, subject, and
what the message says in a few words (an event's type and object, a command's change, a result's
outcome). A payload corral cannot decode is shown as such, never hidden.
"""

from __future__ import annotations

from typing import Any

from corral_decision.bundle import BundleEntry
from corral_model import codec
from corral_model.codec import SchemaError
from corral_model.envelopes import Command, CommandResult, DeadLetter, ObjectEvent
from corral_model.kinds import KINDS
from corral_model.subjects import COMMANDS_STREAM, DEAD_STREAM, OBJECTS_STREAM, RESULTS_STREAM


def _short(value: Any, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def describe(record: BundleEntry) -> str:
    """What the message says, in a few words."""
    data = record.data
    try:
        if record.stream == OBJECTS_STREAM:
            event = codec.decode(data, ObjectEvent[Any])
            kind = KINDS[event.kind].kind if event.kind in KINDS else event.kind
            if not event.name:
                return f"{event.type} {kind} in {event.namespace}"
            return f"{event.type} {kind} {event.namespace}/{event.name} rv {event.resource_version or '-'}"
        if record.stream == COMMANDS_STREAM:
            command = codec.decode(data, Command)
            target = command.target
            changes = ", ".join(f"{c.path}={_short(c.value)}" for c in command.changes)
            return f"{command.verb} {target.kind} {target.namespace}/{target.name} {changes} id {command.id}"
        if record.stream == RESULTS_STREAM:
            result = codec.decode(data, CommandResult)
            target = result.target
            detail = f" ({_short(result.detail)})" if result.detail else ""
            where = f"{target.kind} {target.namespace}/{target.name}"
            return f"{result.outcome} {where} id {result.command_id}{detail}"
        if record.stream == DEAD_STREAM:
            dead = codec.decode(data, DeadLetter)
            return f"dead from {dead.stream or '?'} {dead.subject}: {_short(dead.reason)}"
    except SchemaError as e:
        return f"unreadable: {_short(e, 80)}"
    return f"{len(data)} bytes"


def tail_line(record: BundleEntry) -> str:
    """`06:19:08.123 LH_OBJECTS lh.obj.volume.ns.vol-1 MODIFIED Volume ns/vol-1 rv 42`."""
    clock = record.time[11:23] if len(record.time) >= 23 else record.time
    return f"{clock} {record.stream} {record.subject} {describe(record)}"
