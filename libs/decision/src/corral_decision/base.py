"""What most deciders share, so a new one writes only its rules: when its view is complete, the
resourceVersion it holds per target, and its expectations (commands out, not yet visible).

A decider subclasses `DeciderBase`, calls `observe(event)` first in its `apply`, `expect(command)`
for every command it issues and `settle(target)` once its view shows the change; it overrides
`may_adopt` to say whether another replica's command can still apply. engine-upgrade keeps its own,
denser bookkeeping (it runs at 100 k volumes per event budget of microseconds).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from corral_decision.decider import Clock, Explanation, Pending
from corral_model.envelopes import Command, CommandResult, EventType, ObjectEvent, Outcome, Target
from corral_model.kinds import KINDS

TargetKey = tuple[str, str, str]
"""(Kind, namespace, name), as a `Target` names an object."""


def key_of(target: Target) -> TargetKey:
    return (target.kind, target.namespace, target.name)


class DeciderBase:
    def __init__(self, clock: Clock, reads: Iterable[str]) -> None:
        self.clock = clock
        self._unlisted = set(reads)
        self.versions: dict[TargetKey, int] = {}
        self.pending: dict[TargetKey, Pending] = {}

    @property
    def ready(self) -> bool:
        return not self._unlisted

    def observe(self, event: ObjectEvent[Any]) -> TargetKey | None:
        """Book-keep one event: a RESYNCED marker lists its kind; an object's resourceVersion is
        remembered (forgotten when deleted). Returns the object's key, None for a marker."""
        if event.type is EventType.RESYNCED:
            self._unlisted.discard(event.kind)
            return None
        key = (KINDS[event.kind].kind, event.namespace, event.name)
        if event.type is EventType.DELETED:
            self.versions.pop(key, None)
            self.pending.pop(key, None)
        else:
            self.versions[key] = int(event.resource_version or 0)
        return key

    def expect(self, command: Command, applied: bool = False) -> None:
        self.pending[key_of(command.target)] = Pending(
            command_id=command.id, target=command.target, issued_at=self.clock(), applied=applied
        )

    def settle(self, key: TargetKey) -> None:
        """The view shows what the command for `key` was to do: it no longer counts."""
        self.pending.pop(key, None)

    def may_adopt(self, command: Command) -> bool:
        """Can another replica's command still apply on this view? Override with the command's
        preconditions; the default counts every one (conservative: it holds until its result)."""
        return True

    # --- the Decider protocol ---------------------------------------------------------------------

    def record_result(self, result: CommandResult) -> None:
        key = key_of(result.target)
        mine = self.pending.get(key)
        if mine is None or mine.command_id != result.command_id:
            return
        if result.outcome is Outcome.APPLIED and not result.dry_run:
            self.pending[key] = Pending(
                command_id=mine.command_id, target=mine.target, issued_at=mine.issued_at, applied=True
            )
        else:
            del self.pending[key]

    def adopt(self, command: Command, applied: CommandResult | None) -> bool:
        if key_of(command.target) in self.pending or not self.may_adopt(command):
            return False
        self.expect(command, applied=applied is not None)
        return True

    def observed_version(self, target: Target) -> int | None:
        return self.versions.get(key_of(target))

    def expectations(self) -> list[Pending]:
        return list(self.pending.values())

    def explain(self, key: str | None = None) -> list[Explanation]:
        return []

    def next_due(self) -> float | None:
        return None

    def reconsider_all(self) -> None:
        return None

    def idle_work(self, budget: int) -> int:
        return 0
