"""A command must be what it says it is: its subject, its payload and its id must agree.

NATS permissions bind each decider to its own subjects (`lh.cmd.<itself>.>`), so the subject is the
one part of a command the bus vouches for; the payload is whatever the publisher wrote. A command
whose payload names another service, kind, namespace or object than its subject does was forged or
misrouted: applying it would let one decider act with another's policy (or hide what it touched
from anyone reading the subjects). It is not a decision at all, so it goes to LH_DEAD with the
disagreement as the reason, and no result is published under the id it claims (which could be a
real command's).

The id, too, must be the hash of what the command asks (corral_model.envelopes.command_id): the
actuator remembers a final answer per id and deciders match results to their commands by id, so a
real command's id on other content, answered and remembered, would stand as the real command's
answer. Such a command is dead-lettered the same way.
"""

from __future__ import annotations

from corral_actuator.kinds import resolve_kind
from corral_model.envelopes import Command, command_id
from corral_model.subjects import COMMANDS_PREFIX, unescape_token

_PREFIX = COMMANDS_PREFIX + "."


def subject_tokens(subject: str) -> tuple[str, ...] | None:
    """The unescaped tokens after `lh.cmd.` (service, kind, namespace, name); None: not a command."""
    if not subject.startswith(_PREFIX):
        return None
    return tuple(unescape_token(t) for t in subject[len(_PREFIX) :].split("."))


def subject_service(subject: str) -> str | None:
    """The emitting service named by a command subject `lh.cmd.<service>.…` (None if not one)."""
    tokens = subject_tokens(subject)
    return tokens[0] if tokens else None


def _same_kind(token: str, kind: str) -> bool:
    a, b = resolve_kind(token), resolve_kind(kind)
    if a is None or b is None:
        return token == kind.lower()
    return a is b


def subject_mismatch(subject: str, command: Command) -> str | None:
    """How the subject and the payload disagree, or None when they name the same thing."""
    tokens = subject_tokens(subject)
    if tokens is None or len(tokens) != 4:
        return f"{subject} is not a command subject lh.cmd.<service>.<kind>.<namespace>.<name>"
    service, kind, namespace, name = tokens
    t = command.target
    disagree = [
        f"{what} {ours!r} in the subject but {theirs!r} in the payload"
        for what, ours, theirs, same in (
            ("service", service, command.service, service == command.service),
            ("kind", kind, t.kind, _same_kind(kind, t.kind)),
            ("namespace", namespace, t.namespace, namespace == t.namespace),
            ("name", name, t.name, name == t.name),
        )
        if not same
    ]
    if not disagree:
        return None
    return f"subject and payload disagree: {'; '.join(disagree)}"


def id_mismatch(command: Command) -> str | None:
    """Why the command's id is not the hash of its content, or None when it is."""
    c = command
    if c.id == command_id(
        c.service, c.verb, c.target, c.changes, c.preconditions, c.body, c.related, c.attempt
    ):
        return None
    # (a create's body is hashed too, but its timestamps: corral_model.envelopes.command_id)
    return f"id {c.id!r} is not the hash of the command's service, verb, target, changes and preconditions"
