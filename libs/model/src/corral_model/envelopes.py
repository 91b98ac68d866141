"""The three envelopes that travel on the bus: what changed, what to do, and what was done.

Everything on LH_OBJECTS is an ObjectEvent, everything on LH_COMMANDS a Command, everything on
LH_RESULTS a CommandResult. They are JSON (so `nats sub` stays readable), frozen, keyword-only, and
carry a `schema` string "<name>/v<major>[.<minor>]": decoding ignores unknown fields, so a newer
minor version is read by an older service, while an unknown major version is refused with a clear
error instead of being half-understood.
"""

from __future__ import annotations

import enum
import hashlib
from typing import Any, Generic, Literal, TypeVar

import msgspec

K = TypeVar("K")

EVENT_SCHEMA = "corral.event/v1"
COMMAND_SCHEMA = "corral.command/v1"
RESULT_SCHEMA = "corral.result/v1"


class EventType(enum.StrEnum):
    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    # Marker published after every (re)list of a kind: the consumer's view of that kind is complete.
    RESYNCED = "RESYNCED"
    # The object exists at this resourceVersion but does not decode into its slim Struct (the
    # watcher parked it in LH_DEAD): no object, only `reason`. A consumer must not act on the last
    # state it holds as if it were current; one that cannot tell may keep it (it is older, not wrong).
    UNREADABLE = "UNREADABLE"


class ObjectEvent(msgspec.Struct, Generic[K], frozen=True, kw_only=True, rename="camel"):
    """One observed change of one Kubernetes object (or a RESYNCED marker for a whole kind).

    Generic in the slim object's type: a consumer picks the decoder by the kind in the subject
    (`ObjectEvent[Volume]`), so it decodes straight into typed Structs; `ObjectEvent[Any]` reads any.
    """

    schema: str = EVENT_SCHEMA
    type: EventType
    kind: str
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    # Wall-clock seconds when the watcher saw the change; used for lag metrics only.
    observed_at: float = 0.0
    # The slim object (None for RESYNCED and UNREADABLE). A DELETED event carries the last known state.
    object: K | None = None
    # UNREADABLE only: the decoder's message.
    reason: str = ""

    @property
    def event_id(self) -> str:
        """Deterministic id (kind + uid + resourceVersion): the Nats-Msg-Id that dedups replays."""
        return event_id(self.type, self.kind, self.namespace, self.name, self.uid, self.resource_version)


def event_id(type_: EventType, kind: str, namespace: str, name: str, uid: str, resource_version: str) -> str:
    if type_ is EventType.RESYNCED:
        # A resync marker is unique per list; the list's resourceVersion tells lists apart.
        return f"resync:{kind}:{namespace}:{resource_version}"
    if type_ is EventType.DELETED:
        return f"{kind}:{uid}:{resource_version}:deleted"
    if type_ is EventType.UNREADABLE:
        return f"{kind}:{uid}:{resource_version}:unreadable"
    return f"{kind}:{uid}:{resource_version}"


class Verb(enum.StrEnum):
    PATCH = "patch"
    PATCH_STATUS = "patch-status"
    CREATE = "create"
    DELETE = "delete"


class FieldValue(msgspec.Struct, frozen=True, kw_only=True):
    """A JSON-pointer path and a value: one change, or one precondition."""

    path: str
    value: Any


class Target(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    namespace: str
    name: str
    # For deletes: the uid the object must still have (a recreated object is not ours to delete).
    uid: str = ""


class NoneInStates(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """No entry of the map at `path` may have its `field` (a pointer inside the entry) in `states`:
    e.g. no instance in an instance manager's `/status/instanceReplicas` `running` or `starting`."""

    path: str
    field: str
    states: tuple[str, ...]


class RelatedPrecondition(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What must still hold of another object the decision read (the instance manager whose pod a
    delete targets), checked by the actuator right before it writes the target."""

    target: Target
    holds: tuple[FieldValue, ...] = ()
    none_in: tuple[NoneInStates, ...] = ()


class Command(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A decision: change these fields of this object, provided those fields still hold these values."""

    schema: str = COMMAND_SCHEMA
    id: str
    service: str
    verb: Verb
    target: Target
    changes: tuple[FieldValue, ...] = ()
    preconditions: tuple[FieldValue, ...] = ()
    # Preconditions on other objects the decision read; checked just before a delete (related.py in
    # the actuator). Part of the id: they are part of what was decided.
    related: tuple[RelatedPrecondition, ...] = ()
    # For CREATE: the whole object to create.
    body: dict[str, Any] | None = None
    reason: str = ""
    created_at: float = 0.0
    # The issuing decider's lease term (fencing): the actuator refuses a command from an older term
    # than the newest it has seen from that service. 0 = unfenced (a producer that holds no lease).
    # Not part of the id: a decision republished by the next leader is still the same decision.
    term: int = 0
    # The issuer's retry of the same decision after the first was refused or expired: 0, then 1,
    # 2… Part of the id from 1 on (`command_id`), so a retry within LH_COMMANDS' duplicate window
    # is stored, not dropped as a repeat of the refused one; a re-send of the same attempt (a
    # reconnect, a republishing leader) still is.
    attempt: int = 0


# Canonical bytes for command ids: struct fields in their declared order, dict keys sorted.
# ("deterministic" rather than "sorted": sorting every struct's field names on each call cost
# twice as much as the rest of the encoding, and gives no more determinism.)
_ID_ENCODER = msgspec.json.Encoder(order="deterministic")
_WHEN = frozenset({"firstTimestamp", "lastTimestamp", "eventTime"})


def command_id(
    service: str,
    verb: Verb,
    target: Target,
    changes: tuple[FieldValue, ...],
    preconditions: tuple[FieldValue, ...],
    body: dict[str, Any] | None = None,
    related: tuple[RelatedPrecondition, ...] = (),
    attempt: int = 0,
) -> str:
    """Hash of service, target, intent and precondition: the same decision always has the same id.

    A create's intent is its body, so a body (creates only) is hashed too, but not its timestamps
    (`firstTimestamp`, `lastTimestamp`, `eventTime`: when, not what): a crash-looping gate asks for
    its Event again under the same id, while an Event that says it is the Nth occurrence (`count`)
    is another command, counted on the recorded Event by the actuator. Commands without a body
    hash exactly as before; likewise preconditions on related objects, hashed only when there are any,
    and a retry's `attempt`, hashed only from 1 on (a number: never confused with a body or related).

    So a restarted or duplicated decider republishes an identical Nats-Msg-Id and JetStream drops it.
    The hash input is the canonical JSON of exactly these five (an injective encoding, so different
    decisions never share an input), the hash SHA-256, of which the id keeps 128 bits: different
    decisions do not collide in practice. Ids are `<service>-<32 hex>`.
    """
    timeless = None if body is None else {k: v for k, v in body.items() if k not in _WHEN}
    return timeless_command_id(service, verb, target, changes, preconditions, timeless, related, attempt)


def timeless_command_id(
    service: str,
    verb: Verb,
    target: Target,
    changes: tuple[FieldValue, ...],
    preconditions: tuple[FieldValue, ...],
    timeless_body: dict[str, Any] | None,
    related: tuple[RelatedPrecondition, ...] = (),
    attempt: int = 0,
) -> str:
    """`command_id` for a body already without its timestamps: a producer that builds the body
    itself (an Event, thousands a second in a wave) hashes it before adding them, instead of
    paying for a filtered copy. The same id `command_id` gives the whole body."""
    parts: tuple[Any, ...] = (service, verb, target, changes, preconditions)
    if timeless_body is not None:
        parts = (*parts, timeless_body)
    if related:
        parts = (*parts, related)
    if attempt:
        parts = (*parts, attempt)
    canonical = _ID_ENCODER.encode(parts)
    return f"{service}-{hashlib.sha256(canonical).hexdigest()[:32]}"


def new_command(
    *,
    service: str,
    verb: Verb,
    target: Target,
    changes: tuple[FieldValue, ...] = (),
    preconditions: tuple[FieldValue, ...] = (),
    body: dict[str, Any] | None = None,
    related: tuple[RelatedPrecondition, ...] = (),
    reason: str = "",
    created_at: float = 0.0,
    term: int = 0,
) -> Command:
    return Command(
        id=command_id(service, verb, target, changes, preconditions, body, related),
        service=service,
        verb=verb,
        target=target,
        changes=changes,
        preconditions=preconditions,
        related=related,
        body=body,
        reason=reason,
        created_at=created_at,
        term=term,
    )


def as_attempt(command: Command, attempt: int) -> Command:
    """`command` as its issuer's `attempt`-th retry: the same decision under an id of its own."""
    c = command
    id_ = command_id(c.service, c.verb, c.target, c.changes, c.preconditions, c.body, c.related, attempt)
    return msgspec.structs.replace(c, id=id_, attempt=attempt)


def first_attempt_id(command: Command) -> str:
    """The id `command` had as its decision's first attempt."""
    if not command.attempt:
        return command.id
    c = command
    return command_id(c.service, c.verb, c.target, c.changes, c.preconditions, c.body, c.related)


class Outcome(enum.StrEnum):
    APPLIED = "applied"
    PRECONDITION_FAILED = "precondition-failed"
    REJECTED_BY_POLICY = "rejected-by-policy"
    NOT_FOUND = "not-found"
    ERROR = "error"
    # Refused unapplied: older (by created_at) than the actuator's max command age. Its issuer may
    # already have given up on it and given the slot it held to another command.
    EXPIRED = "expired"


class CommandResult(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What the actuator did with one command, and why."""

    schema: str = RESULT_SCHEMA
    command_id: str
    service: str
    target: Target
    outcome: Outcome
    detail: str = ""
    # The object's resourceVersion after the write ("" when nothing was written).
    resource_version: str = ""
    dry_run: bool = False
    finished_at: float = 0.0


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A message that could not be handled, kept with the reason so nothing is lost silently."""

    schema: str = "corral.dead/v1"
    reason: str
    stream: str = ""
    subject: str = ""
    consumer: str = ""
    deliveries: int = 0
    # For a Kubernetes object that did not decode (the watcher's dead letters): which one.
    kind: str = ""
    namespace: str = ""
    name: str = ""
    resource_version: str = ""
    headers: dict[str, str] = {}
    # The original payload, as text when it was UTF-8, else base64 in payload_b64; only its first
    # bytes when it was too large to keep whole (`truncated`; the size and digest name the original).
    payload: str = ""
    payload_b64: str = ""
    payload_size: int = 0
    payload_sha256: str = ""
    truncated: bool = False


EnvelopeName = Literal["corral.event", "corral.command", "corral.result", "corral.dead"]
