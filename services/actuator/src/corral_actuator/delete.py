"""A delete: read, checked on the object and on what the decision read, then deleted as read.

Deletes always read first: the rule's required labels and the command's preconditions are checked
on that read, then the preconditions on the other objects the decision read (related.py) and the
instance manager idle, whoever asks (instance_manager_guard.py), and the delete carries the uid and
resourceVersion read as its preconditions, so nothing can change in between unseen.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions

from corral_actuator.finished import (
    Finished,
    already_deleting,
    changed_under,
    ended_by,
    precondition_broken,
    recreated,
    refused,
    related_broken,
    version,
)
from corral_actuator.instance_manager_guard import InstanceManagerGuard
from corral_actuator.related import first_broken
from corral_actuator.write import Write
from corral_kube.patching import MISSING, first_not_holding, resolve


async def delete(write: Write, instance_managers: InstanceManagerGuard) -> Finished:
    """Read, check, delete; a transient answer to the delete sends it again only after reading
    and checking again, since what the checks read may have changed during the backoff (an
    instance starting on the instance manager whose pod it is): the window stays one round trip."""
    async for attempt in write.api.retrying():
        with attempt:
            return await _delete_once(write, instance_managers)
    raise AssertionError("unreachable: stamina re-raises the last error")  # pragma: no cover


async def _delete_once(write: Write, instance_managers: InstanceManagerGuard) -> Finished:
    for _ in range(write.attempts):
        snapshot = await write.read()
        if isinstance(snapshot, Finished):
            return snapshot
        blocked = _blocked(write, snapshot) or await _blocked_by_others(write, instance_managers, snapshot)
        if blocked is not None:
            return blocked
        answered = await write.api.request("DELETE", write.path, body=_as_read(snapshot), retried=False)
        ended = ended_by(answered)
        if ended is not None:
            return ended
        # 409: the object changed since the read; read again and re-check.
    return changed_under(write.attempts)


def _blocked(write: Write, snapshot: dict[str, Any]) -> Finished | None:
    """What the object itself says: outside the policy, recreated since the decision, a
    precondition broken, or already on its way out."""
    outside = write.outside_policy(snapshot)
    if outside is not None:
        return outside
    uid = write.command.target.uid
    if uid and resolve(snapshot, "/metadata/uid") != uid:
        return recreated(snapshot)
    broken = first_not_holding(snapshot, write.command.preconditions)
    if broken is not None:
        return precondition_broken(snapshot, broken)
    if resolve(snapshot, "/metadata/deletionTimestamp") not in (MISSING, None, ""):
        return already_deleting(snapshot)
    return None


async def _blocked_by_others(
    write: Write, instance_managers: InstanceManagerGuard, snapshot: dict[str, Any]
) -> Finished | None:
    """The last reads before the delete, one API round trip each: the objects the decision read,
    and the instance manager the delete would take down."""
    command = write.command
    if command.related:
        broken = await first_broken(write.api, command.related, command.target.namespace)
        if broken is not None:
            return related_broken(broken, snapshot)
    refusal = await instance_managers.judge_delete(command, snapshot)
    return None if refusal is None else refused(refusal, snapshot)


def _as_read(snapshot: dict[str, Any]) -> V1DeleteOptions:
    """Delete the object only as it was read: its uid and resourceVersion."""
    uid = resolve(snapshot, "/metadata/uid")
    return V1DeleteOptions(
        preconditions=V1Preconditions(
            uid=uid if isinstance(uid, str) and uid else None, resource_version=version(snapshot) or None
        )
    )
