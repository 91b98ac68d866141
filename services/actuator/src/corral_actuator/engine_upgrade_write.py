"""An engine upgrade: judged under its owner node's lock, written testing the resourceVersion judged.

engine_upgrade_guard.py holds the rules (the per-node limit, eligibility); this is how the write
keeps them. On the informer's copy of the volume first, one request: the patch tests the
resourceVersion the copy was judged at, so a copy that was stale is refused by the API server
(422) rather than written. When that copy is unknown, refused by the rules (it may be stale), or
refused by the server, the upgrade is judged and written on a fresh read (patch.py). A write that
lands is counted in flight on its node at once, before the lock is let go.

A rollback (engine_upgrade_guard.rollback_target: rare, a stuck upgrade's way out) is judged on a
fresh read before anything else, so a forged one is refused by the invariant it breaks (and
security-logged) rather than reported as a precondition that failed.
"""

from __future__ import annotations

from typing import Any

from corral_actuator.api import Answered
from corral_actuator.engine_upgrade_guard import EngineUpgradeGuard, rollback_target
from corral_actuator.finished import Finished, ended_by, refused
from corral_actuator.patch import patch_from_snapshot, why_refused
from corral_actuator.write import Write
from corral_kube.patching import json_patch, needs_snapshot
from corral_model.envelopes import FieldValue


async def upgrade_engine(write: Write, guard: EngineUpgradeGuard) -> Finished:
    async with guard.lock(write.command):
        finished = await _upgrade(write, guard)
        if finished.wrote:
            await guard.written(write.command, finished.resource_version)
    return finished


async def _upgrade(write: Write, guard: EngineUpgradeGuard) -> Finished:
    if rollback_target(write.command) is not None:
        return await _roll_back(write, guard)
    fresh: dict[str, Any] | None = None  # None: judged on a read
    answered = await _patch_on_cache(write, guard)
    if answered is not None:
        ended = ended_by(answered)
        if ended is not None:
            return ended
        if answered.status == 409:
            # A conflict: sent again, judged on a fresh read, if its preconditions still hold there.
            read = await why_refused(write, answered)
            if isinstance(read, Finished):
                return read
            fresh = read
        # A 422: the copy was stale (or a precondition broke), judged on a read.
    return await patch_from_snapshot(write, fresh, judge=guard.judge_document)


async def _roll_back(write: Write, guard: EngineUpgradeGuard) -> Finished:
    """A rollback, judged on the volume as read, then written testing that read's resourceVersion."""
    read = await write.read()
    if isinstance(read, Finished):
        return read
    refusal = await guard.judge_document(write.command, read)
    if refusal is not None:
        return refused(refusal, read)
    return await patch_from_snapshot(write, read, judge=guard.judge_document)


async def _patch_on_cache(write: Write, guard: EngineUpgradeGuard) -> Answered | None:
    """The one-request path: the answer to the patch judged on the informer's copy, or None when
    there is no copy to judge on or the rules refuse it there (confirmed on a read, as the copy
    may be stale)."""
    command, tests = write.command, write.tests  # `tests` builds a tuple: once
    cached = await guard.cached(command)
    if cached is None or needs_snapshot(tests) or await guard.judge(command, cached):
        return None
    judged = FieldValue(path="/metadata/resourceVersion", value=cached.metadata.resource_version)
    return await write.send_patch(json_patch(command.changes, (*tests, judged)))
