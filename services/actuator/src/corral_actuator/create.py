"""A create: POSTed as asked; an object already there is fine when it is the object asked for.

Creates are repeated: a redelivered command, or a decision service saying the same thing again
under the same deterministic name. So a 409 AlreadyExists reads the object, and it is `applied`
when it holds the body (its identity: not the envelope, not status), `precondition-failed` when it
is something else. A repeated Event is the same Event said again: counted on the one there
(occurrences.py), not a second one.
"""

from __future__ import annotations

from typing import Any

from corral_actuator.classify import Answer
from corral_actuator.finished import (
    Finished,
    already_existed,
    changed_under,
    counted_again,
    ended_by,
    http_error,
    other_content,
    refused,
)
from corral_actuator.occurrences import repeat_patch
from corral_actuator.snapshot_guard import is_snapshot, snapshot_refusal
from corral_actuator.write import Write
from corral_kube.patching import subset_holds

# What a repeated create compares to decide it is the same object: not the envelope, not status.
_IDENTITY_IGNORED = ("metadata", "status", "apiVersion", "kind")
# An Event's timestamps and count say when it happened, not what it is: an Event asked for again
# under the same deterministic name (a crash-looping service's gate, a setting blocked again for the
# same reason) is the Event already recorded, and, when it is a later occurrence (a later
# lastTimestamp), counted on it as Kubernetes' event recorder does: count + 1 and the new
# lastTimestamp, not a new Event. The same occurrence asked for again (a redelivery) counts once.
_EVENT_OCCURRENCE = ("firstTimestamp", "lastTimestamp", "eventTime", "count")


async def create(write: Write) -> Finished:
    body = _body(write)
    refusal = write.outside_policy(body) or await _snapshot_refusal(write, body)
    if refusal is not None:
        return refusal
    t = write.command.target
    answered = await write.api.request("POST", write.info.path(t.namespace), body=body)
    if answered.status == 409:
        return await _existing(write, body)
    return ended_by(answered) or http_error(answered)


def _body(write: Write) -> dict[str, Any]:
    """The command's body, addressed to its target and typed as its kind."""
    t, info = write.command.target, write.info
    body = dict(write.command.body or {})
    body["metadata"] = {**body.get("metadata", {}), "namespace": t.namespace, "name": t.name}
    body.setdefault("apiVersion", info.api_version)
    body.setdefault("kind", info.kind)
    return body


async def _snapshot_refusal(write: Write, body: dict[str, Any]) -> Finished | None:
    """A Snapshot of a v2 volume only (snapshot_guard.py)."""
    if not is_snapshot(write.info.kind):
        return None
    refusal = await snapshot_refusal(write.api, write.command.target.namespace, body)
    return None if refusal is None else refused(refusal)


async def _existing(write: Write, body: dict[str, Any]) -> Finished:
    """Already exists: done if it is the object asked for (a repeated create), else refused."""
    is_event = (write.info.group, write.info.kind) == ("", "Event")
    ignored = _IDENTITY_IGNORED + (_EVENT_OCCURRENCE if is_event else ())
    wanted = {k: v for k, v in body.items() if k not in ignored}
    labels = body["metadata"].get("labels", {})
    for _ in range(write.attempts):
        existing = await write.read()
        if isinstance(existing, Finished):
            return existing
        if not (
            subset_holds(wanted, existing)
            and subset_holds(labels, existing.get("metadata", {}).get("labels", {}))
        ):
            return other_content(existing)
        # The same Event said again: count the new occurrence on it (occurrences.py).
        patch = repeat_patch(existing, body) if is_event else None
        if patch is None:
            return already_existed(existing)
        answered = await write.send_patch(patch)
        if answered.answer is Answer.OK:
            return counted_again(answered.resource_version)
        if answered.status not in (409, 422):  # 422: it moved since the read; read again
            return ended_by(answered) or http_error(answered)
    return changed_under(write.attempts, what="Event")
