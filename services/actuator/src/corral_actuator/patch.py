"""A patch: sent at once with its preconditions as `test` operations, explained when refused.

The cheap path is optimistic: a patch whose `test` operations carry the preconditions goes straight
to the API server, one request. Only when the server refuses it does the actuator read the object
to say why: the change may already hold (a repeated command: `applied` without a write), a
precondition may no longer hold (`precondition-failed`: the deciding service re-decides from fresh
state), or the patch needed parents that did not exist yet (it is rebuilt from the object as read,
testing its resourceVersion so nothing can slip in between).

A 409 Conflict is not a broken precondition (that is the `test` operations' 422): the object moved
under the write. When the fresh read shows every precondition still holding, the patch is sent
again within the same command, a few times with a short jittered backoff (conflicts.py); only a
conflict that persists, or a precondition the read shows broken, is reported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from corral_actuator.api import Answered
from corral_actuator.finished import (
    Finished,
    changed_under,
    conflict_persisted,
    ended_by,
    refused,
    refused_again,
    version,
)
from corral_actuator.node_selector_guard import node_selector_refusal
from corral_actuator.write import Write
from corral_kube.patching import json_patch, needs_snapshot
from corral_model.envelopes import Command

Judge = Callable[[Command, dict[str, Any]], Awaitable[str | None]]
"""An invariant held on the object as read (engine_upgrade_guard.py): why not, or None."""


async def patch(write: Write, *, redelivered: bool) -> Finished:
    refusal = await node_selector_refusal(write.api, write.command.changes)  # node_selector_guard.py
    if refusal is not None:
        return refused(refusal)
    if redelivered or needs_snapshot(write.tests):
        # A redelivered command may have been written before the crash that lost its ack:
        # read first, so that a change that already holds is not written twice.
        return await patch_from_snapshot(write, None)
    body = json_patch(write.command.changes, write.tests)
    while True:
        answered = await write.send_patch(body)
        ended = ended_by(answered)
        if ended is not None:
            return ended
        snapshot = await why_refused(write, answered)
        if isinstance(snapshot, Finished):
            return snapshot
        if answered.status != 409:
            # Every precondition holds and the change does not: the patch itself did not fit the
            # object (a parent of a changed path is missing). Rebuild it from what was read.
            return await patch_from_snapshot(write, snapshot)
        # A conflict, and the fresh read shows every precondition holding: send it again.


async def why_refused(write: Write, answered: Answered) -> dict[str, Any] | Finished:
    """After a 409/422: the object read to find out why, or how that ends the command. A 409 whose
    preconditions still hold spends the conflict budget (waiting before the patch goes again)."""
    snapshot = await write.read()
    if isinstance(snapshot, Finished):
        return snapshot
    settled = write.settled(snapshot)
    if settled is not None:
        return settled
    if answered.status == 409 and not await write.conflicts.spend():
        return conflict_persisted(write.conflicts.used, answered, snapshot)
    return snapshot


async def patch_from_snapshot(
    write: Write, snapshot: dict[str, Any] | None, *, judge: Judge | None = None
) -> Finished:
    """The patch built from the object as read (`snapshot`, or a read when None), testing its
    resourceVersion; read again and retried while the object keeps changing under it."""
    attempts = 0
    while attempts < write.attempts:
        attempts += 1
        if snapshot is None:
            read = await write.read()
            if isinstance(read, Finished):
                return read
            snapshot = read
        ended = write.settled(snapshot) or await _judged(write, snapshot, judge)
        if ended is not None:
            return ended
        answered = await write.send_patch(json_patch(write.command.changes, snapshot=snapshot))
        ended = ended_by(answered)
        if ended is not None:
            return ended
        seen = version(snapshot)
        read = await write.read()
        if isinstance(read, Finished):
            return read
        snapshot = read
        if version(snapshot) == seen:
            if answered.status == 409:
                if await write.conflicts.spend():
                    attempts -= 1  # a conflict with nothing changed: not the object moving on
                    continue
                return conflict_persisted(write.conflicts.used, answered, snapshot)
            # The object did not change, so our resourceVersion test passed: the server refused
            # the patch for another reason, and would again.
            return refused_again(answered, seen)
    return changed_under(write.attempts, snapshot)


async def _judged(write: Write, snapshot: dict[str, Any], judge: Judge | None) -> Finished | None:
    if judge is None:
        return None
    refusal = await judge(write.command, snapshot)
    return None if refusal is None else refused(refusal, snapshot)
