"""Kubernetes Events as commands: how a decision service, which holds no credentials, tells an
operator with only `kubectl` what it is doing (`kubectl describe volume pvc-a`, `kubectl get events`).

A decider returns an Event command from `decide()` beside its other commands; the actuator creates
the core/v1 Event (the policy's `common` rule lets every service do that). Events are deduplicated
as Kubernetes' own event recorder does it:

* the Event's name is derived from what it says (involved object, type, reason, message, source),
  so the same report about the same object always addresses the same Event;
* the command carries the occurrence as a precondition on `/lastTimestamp`, so each occurrence is
  a distinct command (its own id: JetStream's dedup window does not swallow a repeat), while a
  redelivered command is the same occurrence;
* the actuator creates the Event the first time, and for a later occurrence increments `count`
  and moves `lastTimestamp` on the existing Event instead of creating another one
  (services/actuator `_create`).

Keeping the volume of Events bounded (one per transition, not one per decision pass) is the
decider's part: it emits an Event when what it reports about an object changes.
"""

from __future__ import annotations

import enum
import hashlib
import time
from typing import Any

import msgspec

from corral_model.envelopes import Command, FieldValue, Target, Verb, timeless_command_id
from corral_model.kinds import KINDS

MAX_MESSAGE = 1024
"""Kubernetes caps an Event's message at 1 KiB in its event recorder; longer ones are cut."""

OCCURRENCE_PATH = "/lastTimestamp"
"""The precondition path that names an Event command's occurrence (see the module docstring)."""

_API_VERSIONS = {info.kind: info.api_version for info in KINDS.values()}
_encode = msgspec.json.Encoder().encode
_blake2b = hashlib.blake2b
_CREATE = Verb.CREATE


class EventType(enum.StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


# Each type's value as a plain str: reading `.value` goes through the enum's property, twice per
# Event (its name and its body), thousands of Events a second in a wave.
_TYPE_VALUES = {member: member.value for member in EventType}


def component_of(service: str) -> str:
    """The Event's source component, as the upgrade-path gate names it: `corral-<service>`."""
    return f"corral-{service}"


_last_stamp: tuple[int, str, tuple[FieldValue, ...]] = (-1, "", ())


def timestamp(now: float) -> str:
    """Event timestamps are whole seconds (metav1.Time). The last one is kept: a wave makes
    thousands of Events a second, and formatting a time costs more than the rest of a name."""
    return _occurrence(now)[0]


def _occurrence(now: float) -> tuple[str, tuple[FieldValue, ...]]:
    """The timestamp of `now` and the precondition naming that occurrence, kept for the second
    (both frozen: every Event of that second shares them)."""
    global _last_stamp
    second = int(now)
    if _last_stamp[0] != second:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second))
        _last_stamp = (second, stamp, (FieldValue(path=OCCURRENCE_PATH, value=stamp),))
    return _last_stamp[1], _last_stamp[2]


def involved_object(target: Target) -> dict[str, Any]:
    """`involvedObject` for an object corral knows by kind (Volume, Pod, Setting…)."""
    involved: dict[str, Any] = {"kind": target.kind, "name": target.name}
    api_version = _API_VERSIONS.get(target.kind)
    if api_version is not None:
        involved["apiVersion"] = api_version
    if target.namespace:
        involved["namespace"] = target.namespace
    if target.uid:
        involved["uid"] = target.uid
    return involved


def event_name(service: str, about: Target, type_: EventType, reason: str, message: str) -> str:
    """`<object name>.<16 hex>`: Kubernetes' own `<name>.<suffix>` shape, the suffix a hash of what
    the Event says, so a repeat addresses the Event it repeats."""
    return _event_name(service, about, _TYPE_VALUES[type_], reason, message)


def _event_name(service: str, about: Target, type_value: str, reason: str, message: str) -> str:
    identity = (service, about.kind, about.namespace, about.name, type_value, reason, message)
    digest = _blake2b(_encode(identity), digest_size=8).hexdigest()
    return f"{about.name[: 253 - 17]}.{digest}"


def event_command(
    *,
    service: str,
    about: Target,
    type_: EventType,
    reason: str,
    message: str,
    now: float,
    namespace: str = "",
) -> Command:
    """A CREATE command for one occurrence of an Event about `about`, recorded in `namespace`
    (default: the object's own namespace, as Kubernetes records it)."""
    message = message[:MAX_MESSAGE]
    namespace = namespace or about.namespace
    type_value = _TYPE_VALUES[type_]
    name = _event_name(service, about, type_value, reason, message)
    component = f"corral-{service}"  # component_of
    stamp, occurrence = _occurrence(now)
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": involved_object(about),
        "type": type_value,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "count": 1,
    }
    target = Target(kind="Event", namespace=namespace, name=name)
    # Hashed before the timestamps go in (they are not part of the id): no filtered copy to make.
    id_ = timeless_command_id(service, _CREATE, target, (), occurrence, body)
    body["firstTimestamp"] = body["lastTimestamp"] = stamp
    return Command(
        id=id_,
        service=service,
        verb=_CREATE,
        target=target,
        preconditions=occurrence,
        body=body,
        reason=f"{reason}: {message}"[:MAX_MESSAGE],
        created_at=now,
    )


def is_event(command: Command) -> bool:
    return command.target.kind == "Event"
