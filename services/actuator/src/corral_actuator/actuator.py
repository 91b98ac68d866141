"""One command in, one result out: check, then patch or delete or create, then the result.

`execute` reads as the command goes. The policy checks it (policy.py, reading the settings its
rule names); a command too old to apply is `expired` (expiry.py); then it is written by the path
for its verb, each a module of its own steps: an engine upgrade (engine_upgrade_write.py), a patch
(patch.py), a delete (delete.py), a create (create.py). Each step returns how the command ended
(finished.py, where every reason is worded) or goes on, and `_finish` makes the one result:
a refusal is security-logged there, and only an applied command teaches the fence its term.

Before any of this the runner asks `admit`: a command not saying when it was made, dated in the
future, or from a stale leader term is refused (admission.py), and not remembered against its id.

A command older than `max_command_age` (expiry.py) is not applied: `expired`. A patch is checked
against the object first, so a write that already happened (a redelivery after a crash that lost
the ack) is still reported `applied`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import Any

from opentelemetry.trace import Tracer

from corral_actuator.admission import DEFAULT_MAX_CLOCK_SKEW, TermFence, timing_refusal
from corral_actuator.api import KubeApi
from corral_actuator.classify import TransientApiError
from corral_actuator.conflicts import ConflictBudget, ConflictRetry
from corral_actuator.create import create
from corral_actuator.delete import delete
from corral_actuator.engine_upgrade_guard import EngineUpgradeGuard
from corral_actuator.engine_upgrade_write import upgrade_engine
from corral_actuator.expiry import DEFAULT_MAX_COMMAND_AGE, overage
from corral_actuator.finished import Finished, already_held, expired, gave_up, refused
from corral_actuator.instance_manager_guard import InstanceManagerGuard
from corral_actuator.patch import patch
from corral_actuator.policy import Policy, Verdict
from corral_actuator.settings import SettingValues
from corral_actuator.tracing import policy_span
from corral_actuator.write import Write
from corral_kube.patching import first_not_holding
from corral_model.envelopes import Command, CommandResult, Outcome, Verb

SecurityLog = Callable[[Command, str], None]
_PATCHES = (Verb.PATCH, Verb.PATCH_STATUS)


def _no_security_log(command: Command, reason: str) -> None:
    return None


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

    def reject(self, command: Command, reason: str) -> CommandResult:
        return self._finish(command, refused(reason))

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
            verdict = await self._check(command)
            finished = await self._apply(command, verdict, redelivered)
        except TransientApiError as e:
            finished = gave_up(e)
        return self._finish(command, finished)

    async def _apply(self, command: Command, verdict: Verdict, redelivered: bool) -> Finished:
        """Refused by the policy, too old, or written by the path for what it asks."""
        if not verdict.allowed or verdict.kind is None:
            return refused(verdict.reason)
        write = Write(
            self.api,
            command,
            verdict.guards,
            verdict.kind,
            self._conflict_budget(command),
            self.snapshot_attempts,
        )
        age = overage(command, verdict.kind, self.max_command_age, self.clock())
        if age is not None:
            return await self._expire(write, age)
        if self.engine_upgrades.applies(command):
            return await upgrade_engine(write, self.engine_upgrades)
        if command.verb in _PATCHES:
            return await patch(write, redelivered=redelivered)
        if command.verb is Verb.DELETE:
            return await delete(write, self.instance_managers)
        return await create(write)

    def _finish(self, command: Command, finished: Finished) -> CommandResult:
        """The one place a command ends. A refusal by policy is a security event, and only a
        command applied says its leader term is in use (admission.py)."""
        if finished.outcome is Outcome.REJECTED_BY_POLICY:
            self.security_log(command, finished.detail)
        elif finished.outcome is Outcome.APPLIED:
            self.fence.learn(command.service, command.term)
        return CommandResult(
            command_id=command.id,
            service=command.service,
            target=command.target,
            outcome=finished.outcome,
            detail=finished.detail,
            resource_version=finished.resource_version,
            dry_run=self.api.dry_run,
            finished_at=self.clock(),
        )

    def _check(self, command: Command) -> Coroutine[Any, Any, Verdict]:
        """The verdict's coroutine, untraced handed back rather than awaited in one more frame."""
        if self.tracer is None:
            return self._verdict(command)
        return self._traced_verdict(self.tracer, command)

    async def _traced_verdict(self, tracer: Tracer, command: Command) -> Verdict:
        with policy_span(tracer) as span:
            verdict = await self._verdict(command)
            span.set_attribute("corral.policy.allowed", verdict.allowed)
            if verdict.reason:
                span.set_attribute("corral.policy.reason", verdict.reason)
            return verdict

    async def _verdict(self, command: Command) -> Verdict:
        needed = self.policy.settings_needed(command)
        ns, made = command.target.namespace, command.created_at
        values = {name: await self.settings.value(ns, name, not_before=made) for name in needed}
        return self.policy.check(command, values)

    async def _expire(self, write: Write, age: float) -> Finished:
        """Too old to apply; but a patch already holding was applied (a redelivery after a crash
        that lost the ack), so a patch is judged on the object first."""
        if write.command.verb not in _PATCHES:
            return expired(age, self.max_command_age)
        snapshot = await write.read()
        if isinstance(snapshot, Finished):
            return snapshot
        outside = write.outside_policy(snapshot)
        if outside is not None:
            return outside
        if first_not_holding(snapshot, write.command.changes) is None:
            return already_held(snapshot)
        return expired(age, self.max_command_age, snapshot)

    async def close(self) -> None:
        """Stop what the actuator keeps running (its informer of the volumes)."""
        await self.engine_upgrades.close()
