"""One command in, one result out: policy check, preconditioned write, classification.

The cheap path is optimistic: a patch whose `test` operations carry the preconditions goes straight
to the API server, one request. Only when the server refuses it does the actuator read the object
to say why: the change may already hold (a repeated command: `applied` without a write), a
precondition may no longer hold (`precondition-failed`: the deciding service re-decides from fresh
state), or the patch needed parents that did not exist yet (it is rebuilt from the object as read,
testing its resourceVersion so nothing can slip in between). Deletes always read first: the rule's
required labels and the command's preconditions are checked on that read, then the preconditions on
the other objects the decision read (related.py), and the delete carries the uid and
resourceVersion read as its preconditions.

A 409 Conflict is not a broken precondition (that is the `test` operations' 422): the object moved
under the write. When the fresh read shows every precondition still holding, the patch is sent
again within the same command, a few times with a short jittered backoff (conflicts.py); only a
conflict that persists, or a precondition the read shows broken, is reported.

Before any of this the runner asks `admit`: a command not saying when it was made, dated in the
future, or from a stale leader term is refused (admission.py), and not remembered against its id.

A command older than `max_command_age` (expiry.py) is not applied: `expired`. A patch is checked
against the object first, so a write that already happened (a redelivery after a crash that lost
the ack) is still reported `applied`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions
from opentelemetry.trace import Tracer

from corral_actuator.admission import DEFAULT_MAX_CLOCK_SKEW, TermFence, timing_refusal
from corral_actuator.api import JSON_PATCH, Answered, KubeApi
from corral_actuator.classify import Answer, TransientApiError
from corral_actuator.conflicts import ConflictBudget, ConflictRetry
from corral_actuator.engine_upgrade_guard import EngineUpgradeGuard
from corral_actuator.expiry import DEFAULT_MAX_COMMAND_AGE, overage
from corral_actuator.instance_manager_guard import InstanceManagerGuard
from corral_actuator.kinds import KindInfo
from corral_actuator.node_selector_guard import node_selector_refusal
from corral_actuator.occurrences import repeat_patch
from corral_actuator.policy import Policy, Verdict
from corral_actuator.related import first_broken
from corral_actuator.settings import SettingValues
from corral_actuator.snapshot_guard import is_snapshot, snapshot_refusal
from corral_actuator.tracing import policy_span
from corral_kube.patching import (
    MISSING,
    describe_mismatch,
    first_not_holding,
    json_patch,
    needs_snapshot,
    resolve,
    subset_holds,
)
from corral_model.envelopes import Command, CommandResult, FieldValue, Outcome, Verb

SecurityLog = Callable[[Command, str], None]


def _no_security_log(command: Command, reason: str) -> None:
    return None


class _Done(Exception):
    """Carries a finished outcome out of nested steps."""

    def __init__(self, outcome: Outcome, detail: str = "", resource_version: str = "") -> None:
        super().__init__(detail)
        self.outcome = outcome
        self.detail = detail
        self.resource_version = resource_version


def _rv(document: dict[str, Any]) -> str:
    value = resolve(document, "/metadata/resourceVersion")
    return value if isinstance(value, str) else ""


# What a repeated create compares to decide it is the same object: not the envelope, not status.
_IDENTITY_IGNORED = ("metadata", "status", "apiVersion", "kind")
# An Event's timestamps and count say when it happened, not what it is: an Event asked for again
# under the same deterministic name (a crash-looping service's gate, a setting blocked again for the
# same reason) is the Event already recorded, and, when it is a later occurrence (a later
# lastTimestamp), counted on it as Kubernetes' event recorder does: count + 1 and the new
# lastTimestamp, not a new Event. The same occurrence asked for again (a redelivery) counts once.
_EVENT_OCCURRENCE = ("firstTimestamp", "lastTimestamp", "eventTime", "count")


class Actuator:
    """Applies commands to the API server within the policy. Safe to call concurrently, but two
    commands for the same object should be serialised by the caller to keep their order."""

    def __init__(
        self,
        api: KubeApi,
        policy: Policy,
        *,
        settings: SettingValues | None = None,
        security_log: SecurityLog = _no_security_log,
        snapshot_attempts: int = 3,
        clock: Callable[[], float] = time.time,
        max_command_age: float = DEFAULT_MAX_COMMAND_AGE,
        max_clock_skew: float = DEFAULT_MAX_CLOCK_SKEW,
        fence: TermFence | None = None,
        conflict_retry: ConflictRetry | None = None,
        on_conflict_retry: Callable[[Command], None] | None = None,
        tracer: Tracer | None = None,
        engine_upgrade_limit: int = 1,
    ) -> None:
        """`engine_upgrade_limit`: corral's own per-node limit, held while Longhorn's is 0
        (engine_upgrade_guard.py)."""
        self.api = api
        self.tracer = tracer
        self.policy = policy
        self.settings = settings or SettingValues(api)
        self.security_log = security_log
        self.snapshot_attempts = snapshot_attempts
        self.clock = clock
        self.max_command_age = max_command_age
        self.max_clock_skew = max_clock_skew
        self.fence = fence or TermFence()
        self.conflict_retry = conflict_retry or ConflictRetry()
        self._on_conflict_retry = on_conflict_retry
        self.conflict_retries = 0
        """Patches sent again after a 409 whose preconditions still held (all commands)."""
        self.engine_upgrades = EngineUpgradeGuard(api, self.settings, engine_upgrade_limit)
        self.instance_managers = InstanceManagerGuard(api, self.settings)

    def _conflict_budget(self, command: Command) -> ConflictBudget:
        def counted() -> None:
            self.conflict_retries += 1
            if self._on_conflict_retry is not None:
                self._on_conflict_retry(command)

        return ConflictBudget(self.conflict_retry, on_retry=counted)

    def _result(self, command: Command, outcome: Outcome, detail: str = "", rv: str = "") -> CommandResult:
        return CommandResult(
            command_id=command.id,
            service=command.service,
            target=command.target,
            outcome=outcome,
            detail=detail,
            resource_version=rv,
            dry_run=self.api.dry_run,
            finished_at=self.clock(),
        )

    def reject(self, command: Command, reason: str) -> CommandResult:
        self.security_log(command, reason)
        return self._result(command, Outcome.REJECTED_BY_POLICY, reason)

    def admit(self, command: Command) -> CommandResult | None:
        """The refusal of a command made at an unbelievable time or by a stale leader (admission.py),
        or None to go on. The term is learned only once a command of it is applied (execute)."""
        reason = timing_refusal(command.created_at, self.clock(), self.max_clock_skew)
        if reason is None:
            fenced = self.policy.fenced(command.service)
            reason = self.fence.refusal(command.service, command.term, fenced=fenced)
        return None if reason is None else self.reject(command, reason)

    async def execute(self, command: Command, *, redelivered: bool = False) -> CommandResult:
        """Apply `command` and say what happened; never raises for anything the server answers."""
        try:
            if self.tracer is None:
                verdict = await self._check(command)
            else:
                verdict = await self._traced_check(command, self.tracer)
            if not verdict.allowed or verdict.kind is None:
                return self.reject(command, verdict.reason)
            age = overage(command, verdict.kind, self.max_command_age, self.clock())
            if age is not None:
                await self._expire(command, verdict.guards, verdict.kind, age)
            await self._apply(command, verdict, verdict.kind, redelivered)
        except _Done as done:
            if done.outcome is Outcome.APPLIED:
                # Only a write that happened says the term is in use (admission.py).
                self.fence.learn(command.service, command.term)
            return self._result(command, done.outcome, done.detail, done.resource_version)
        except TransientApiError as e:
            return self._result(command, Outcome.ERROR, f"gave up after retries: {e}")
        raise AssertionError("every step ends in _Done")  # pragma: no cover

    async def _traced_check(self, command: Command, tracer: Tracer) -> Verdict:
        with policy_span(tracer) as span:
            verdict = await self._check(command)
            span.set_attribute("corral.policy.allowed", verdict.allowed)
            if verdict.reason:
                span.set_attribute("corral.policy.reason", verdict.reason)
            return verdict

    async def _check(self, command: Command) -> Verdict:
        needed = self.policy.settings_needed(command)
        ns, made = command.target.namespace, command.created_at
        values = {name: await self.settings.value(ns, name, not_before=made) for name in needed}
        return self.policy.check(command, values)

    async def _apply(self, command: Command, verdict: Verdict, info: KindInfo, redelivered: bool) -> None:
        if self.engine_upgrades.applies(command):
            await self._upgrade_engine(command, verdict.guards, info)
        if command.verb in (Verb.PATCH, Verb.PATCH_STATUS):
            await self._patch(command, verdict.guards, info, redelivered)
        elif command.verb is Verb.DELETE:
            await self._delete(command, verdict.guards, info)
        else:
            await self._create(command, verdict.guards, info)

    async def _expire(
        self, command: Command, guards: tuple[FieldValue, ...], info: KindInfo, age: float
    ) -> NoReturn:
        detail = (
            f"created {age:.1f} s ago, older than the maximum command age of {self.max_command_age:g} s;"
            " not applied (its issuer may have given up on it)"
        )
        if command.verb in (Verb.PATCH, Verb.PATCH_STATUS):
            t = command.target
            snapshot = await self._read(info, t.namespace, t.name)
            self._guard(command, guards, snapshot)
            if first_not_holding(snapshot, command.changes) is None:
                raise _Done(Outcome.APPLIED, "already held; nothing written", _rv(snapshot))
            raise _Done(Outcome.EXPIRED, detail, _rv(snapshot))
        raise _Done(Outcome.EXPIRED, detail)

    # --- patch --------------------------------------------------------------------------------

    async def _patch(
        self, command: Command, guards: tuple[FieldValue, ...], info: KindInfo, redelivered: bool
    ) -> None:
        t = command.target
        refusal = await node_selector_refusal(self.api, command.changes)  # node_selector_guard.py
        if refusal is not None:
            self.security_log(command, refusal)
            raise _Done(Outcome.REJECTED_BY_POLICY, refusal)
        tests = (*guards, *command.preconditions)
        conflicts = self._conflict_budget(command)
        if redelivered or needs_snapshot(tests):
            # A redelivered command may have been written before the crash that lost its ack:
            # read first, so that a change that already holds is not written twice.
            await self._patch_from_snapshot(command, guards, info, None, conflicts)
        path = info.path(t.namespace, t.name) + ("/status" if command.verb is Verb.PATCH_STATUS else "")
        body = json_patch(command.changes, tests)
        while True:
            answered = await self.api.request("PATCH", path, body=body, content_type=JSON_PATCH)
            self._finish_on(answered)
            # Refused (409/422): find out why from the object itself.
            snapshot = await self._read(info, t.namespace, t.name)
            self._settle(command, guards, snapshot)
            if answered.status != 409:
                break
            # A conflict, and the fresh read shows every precondition holding: send it again.
            if not await conflicts.spend():
                raise _Done(
                    Outcome.PRECONDITION_FAILED,
                    f"conflict persisted through {conflicts.used} retries: {answered.message}",
                    _rv(snapshot),
                )
        # Every precondition holds and the change does not: the patch itself did not fit the object
        # (a parent of a changed path is missing). Rebuild it from what was read.
        await self._patch_from_snapshot(command, guards, info, snapshot, conflicts)

    async def _upgrade_engine(
        self, command: Command, guards: tuple[FieldValue, ...], info: KindInfo
    ) -> NoReturn:
        """An engine upgrade is judged under its owner node's lock and written testing the
        resourceVersion judged (engine_upgrade_guard.py): on the informer's copy of the volume
        first, one request; on a fresh read when that copy is refused, stale or unknown."""
        guard = self.engine_upgrades
        conflicts = self._conflict_budget(command)
        async with guard.lock(command):
            try:
                snapshot = await self._upgrade_from_cache(command, guards, info, conflicts)
                await self._patch_from_snapshot(
                    command, guards, info, snapshot, conflicts, judge=guard.judge_document
                )
            except _Done as done:
                if done.outcome is Outcome.APPLIED and done.detail == "":  # written now
                    await guard.written(command, done.resource_version)
                raise

    async def _upgrade_from_cache(
        self, command: Command, guards: tuple[FieldValue, ...], info: KindInfo, conflicts: ConflictBudget
    ) -> dict[str, Any] | None:
        """The one-request path; finishes, or returns the fresh read (None: none yet) to judge on."""
        cached = await self.engine_upgrades.cached(command)
        tests = (*guards, *command.preconditions)
        if cached is None or needs_snapshot(tests) or await self.engine_upgrades.judge(command, cached):
            return None  # unknown, or refused on a copy that may be stale: judged on a read
        t = command.target
        judged = FieldValue(path="/metadata/resourceVersion", value=cached.metadata.resource_version)
        body = json_patch(command.changes, (*tests, judged))
        answered = await self.api.request(
            "PATCH", info.path(t.namespace, t.name), body=body, content_type=JSON_PATCH
        )
        self._finish_on(answered)  # returns on 409/422 only
        if answered.status != 409:
            return None  # the copy was stale (or a precondition broke): judged on a read
        # A conflict: sent again, judged on a fresh read, if its preconditions still hold there.
        snapshot = await self._read(info, t.namespace, t.name)
        self._settle(command, guards, snapshot)
        if not await conflicts.spend():
            raise _Done(
                Outcome.PRECONDITION_FAILED,
                f"conflict persisted through {conflicts.used} retries: {answered.message}",
                _rv(snapshot),
            )
        return snapshot

    async def close(self) -> None:
        """Stop what the actuator keeps running (its informer of the volumes)."""
        await self.engine_upgrades.close()

    def _settle(self, command: Command, guards: tuple[FieldValue, ...], snapshot: dict[str, Any]) -> None:
        """Finish when the object is outside the policy, already shows the change, or shows a
        precondition broken."""
        self._guard(command, guards, snapshot)
        if first_not_holding(snapshot, command.changes) is None:
            raise _Done(Outcome.APPLIED, "already held; nothing written", _rv(snapshot))
        broken = first_not_holding(snapshot, command.preconditions)
        if broken is not None:
            raise _Done(Outcome.PRECONDITION_FAILED, describe_mismatch(snapshot, broken), _rv(snapshot))

    def _guard(self, command: Command, guards: tuple[FieldValue, ...], document: dict[str, Any]) -> None:
        """The policy rule's required fields (e.g. the instance-manager label) are not negotiable:
        an object without them is outside the policy, whatever the command's preconditions say."""
        broken = first_not_holding(document, guards)
        if broken is not None:
            mismatch = describe_mismatch(document, broken, expected_is_public=True)
            reason = f"the object is outside the policy: {mismatch}"
            self.security_log(command, reason)
            raise _Done(Outcome.REJECTED_BY_POLICY, reason, _rv(document))

    async def _patch_from_snapshot(
        self,
        command: Command,
        guards: tuple[FieldValue, ...],
        info: KindInfo,
        snapshot: dict[str, Any] | None,
        conflicts: ConflictBudget,
        *,
        judge: Callable[[Command, dict[str, Any]], Awaitable[str | None]] | None = None,
    ) -> NoReturn:
        t = command.target
        path = info.path(t.namespace, t.name) + ("/status" if command.verb is Verb.PATCH_STATUS else "")
        attempts = 0
        while attempts < self.snapshot_attempts:
            attempts += 1
            if snapshot is None:
                snapshot = await self._read(info, t.namespace, t.name)
            self._settle(command, guards, snapshot)
            if judge is not None:  # an invariant held on the object as read (engine_upgrade_guard.py)
                broken = await judge(command, snapshot)
                if broken is not None:
                    self.security_log(command, broken)
                    raise _Done(Outcome.REJECTED_BY_POLICY, broken, _rv(snapshot))
            answered = await self.api.request(
                "PATCH", path, body=json_patch(command.changes, snapshot=snapshot), content_type=JSON_PATCH
            )
            self._finish_on(answered)
            seen = _rv(snapshot)
            snapshot = await self._read(info, t.namespace, t.name)
            if _rv(snapshot) == seen:
                if answered.status == 409 and await conflicts.spend():
                    attempts -= 1  # a conflict with nothing changed: not the object moving on
                    continue
                # The object did not change, so our resourceVersion test passed: the server refused
                # the patch for another reason, and would again.
                outcome = Outcome.PRECONDITION_FAILED if answered.status == 409 else Outcome.ERROR
                raise _Done(outcome, f"HTTP {answered.status}: {answered.message}", seen)
        raise _Done(
            Outcome.PRECONDITION_FAILED,
            f"the object changed under {self.snapshot_attempts} attempts in a row",
            _rv(snapshot or {}),
        )

    # --- delete -------------------------------------------------------------------------------

    async def _delete(self, command: Command, guards: tuple[FieldValue, ...], info: KindInfo) -> None:
        """Read, check, delete; a transient answer to the delete sends it again only after reading
        and checking again, since what the checks read may have changed during the backoff (an
        instance starting on the instance manager whose pod it is): the window stays one round trip."""
        async for attempt in self.api.retrying():
            with attempt:
                await self._delete_once(command, guards, info)

    async def _delete_once(self, command: Command, guards: tuple[FieldValue, ...], info: KindInfo) -> None:
        t = command.target
        for _ in range(self.snapshot_attempts):
            snapshot = await self._read(info, t.namespace, t.name)
            self._guard(command, guards, snapshot)
            uid = resolve(snapshot, "/metadata/uid")
            if t.uid and uid != t.uid:
                raise _Done(
                    Outcome.PRECONDITION_FAILED,
                    "uid differs from the one judged: the object was recreated",
                    _rv(snapshot),
                )
            broken = first_not_holding(snapshot, command.preconditions)
            if broken is not None:
                raise _Done(Outcome.PRECONDITION_FAILED, describe_mismatch(snapshot, broken), _rv(snapshot))
            if resolve(snapshot, "/metadata/deletionTimestamp") not in (MISSING, None, ""):
                raise _Done(Outcome.APPLIED, "already being deleted; nothing written", _rv(snapshot))
            # The last reads before the delete, one API round trip each: the objects the decision
            # read (related.py), and the instance manager idle, whoever asks (instance_manager_guard.py).
            related = await first_broken(self.api, command.related, t.namespace) if command.related else None
            if related is not None:
                raise _Done(Outcome.PRECONDITION_FAILED, related, _rv(snapshot))
            refusal = await self.instance_managers.judge_delete(command, snapshot)
            if refusal is not None:
                self.security_log(command, refusal)
                raise _Done(Outcome.REJECTED_BY_POLICY, refusal, _rv(snapshot))
            options = V1DeleteOptions(
                preconditions=V1Preconditions(
                    uid=uid if isinstance(uid, str) and uid else None, resource_version=_rv(snapshot) or None
                )
            )
            answered = await self.api.request(
                "DELETE", info.path(t.namespace, t.name), body=options, retried=False
            )
            self._finish_on(answered)
            # 409: the object changed since the read; read again and re-check.
        raise _Done(
            Outcome.PRECONDITION_FAILED,
            f"the object changed under {self.snapshot_attempts} attempts in a row",
        )

    # --- create -------------------------------------------------------------------------------

    async def _create(self, command: Command, guards: tuple[FieldValue, ...], info: KindInfo) -> None:
        t = command.target
        body = dict(command.body or {})
        body["metadata"] = {**body.get("metadata", {}), "namespace": t.namespace, "name": t.name}
        body.setdefault("apiVersion", info.api_version)
        body.setdefault("kind", info.kind)
        self._guard(command, guards, body)
        if is_snapshot(info.kind):  # of a v2 volume only (snapshot_guard.py)
            refusal = await snapshot_refusal(self.api, t.namespace, body)
            if refusal is not None:
                self.security_log(command, refusal)
                raise _Done(Outcome.REJECTED_BY_POLICY, refusal)
        answered = await self.api.request("POST", info.path(t.namespace), body=body)
        if answered.answer is Answer.OK:
            raise _Done(Outcome.APPLIED, "", answered.resource_version)
        if answered.status != 409:
            self._finish_on(answered)
            raise _Done(Outcome.ERROR, f"HTTP {answered.status}: {answered.message}")
        # Already exists: done if it is the object asked for (a repeated create), else refused.
        is_event = (info.group, info.kind) == ("", "Event")
        ignored = _IDENTITY_IGNORED + (_EVENT_OCCURRENCE if is_event else ())
        wanted = {k: v for k, v in body.items() if k not in ignored}
        labels = body["metadata"].get("labels", {})
        for _ in range(self.snapshot_attempts):
            existing = await self._read(info, t.namespace, t.name)
            if not (
                subset_holds(wanted, existing)
                and subset_holds(labels, existing.get("metadata", {}).get("labels", {}))
            ):
                raise _Done(
                    Outcome.PRECONDITION_FAILED,
                    "an object with this name exists with other content",
                    _rv(existing),
                )
            # The same Event said again: count the new occurrence on it (occurrences.py).
            patch = repeat_patch(existing, body) if is_event else None
            if patch is None:
                raise _Done(Outcome.APPLIED, "already existed; nothing written", _rv(existing))
            answered = await self.api.request(
                "PATCH", info.path(t.namespace, t.name), body=patch, content_type=JSON_PATCH
            )
            if answered.answer is Answer.OK:
                raise _Done(Outcome.APPLIED, "counted again on the existing Event", answered.resource_version)
            if answered.status not in (409, 422):  # 422: it moved since the read; read again
                self._finish_on(answered)
                raise _Done(Outcome.ERROR, f"HTTP {answered.status}: {answered.message}")
        raise _Done(
            Outcome.PRECONDITION_FAILED, f"the Event changed under {self.snapshot_attempts} attempts in a row"
        )

    # --- shared -------------------------------------------------------------------------------

    @staticmethod
    def _finish_on(answered: Answered) -> None:
        """Finish on success, not-found and refusals; return on 409/422 for the caller to examine."""
        answer = answered.answer
        if answer is Answer.OK:
            raise _Done(Outcome.APPLIED, "", answered.resource_version)
        if answer is Answer.NOT_FOUND:
            raise _Done(Outcome.NOT_FOUND, answered.message)
        if answer is Answer.REFUSED:
            raise _Done(Outcome.ERROR, f"HTTP {answered.status}: {answered.message}")

    async def _read(self, info: KindInfo, namespace: str, name: str) -> dict[str, Any]:
        answered = await self.api.get(info.path(namespace, name))
        if answered.answer is Answer.NOT_FOUND:
            raise _Done(Outcome.NOT_FOUND, answered.message)
        document = answered.document() if answered.answer is Answer.OK else None
        if document is None:
            raise _Done(Outcome.ERROR, f"reading {info.kind} {namespace}/{name}: HTTP {answered.status}")
        return document
