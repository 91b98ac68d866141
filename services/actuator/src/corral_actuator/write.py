"""One command on its way to the API server: its object, the rule's guards, its conflict budget.

Patch, delete and create (patch.py, delete.py, create.py) each read the object, judge it and write
it. What they share lives here: where the object is, reading it (a read that cannot be made ends
the command), and the checks every read of a patched object is put to, in one order: outside the
policy, the change already there, a precondition broken.
"""

from __future__ import annotations

from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from corral_actuator.api import JSON_PATCH, Answered, KubeApi
from corral_actuator.classify import Answer
from corral_actuator.conflicts import ConflictBudget
from corral_actuator.finished import (
    Finished,
    already_held,
    not_found,
    outside_policy,
    precondition_broken,
    unreadable,
)
from corral_actuator.kinds import KindInfo
from corral_kube.patching import first_not_holding
from corral_model.envelopes import Command, FieldValue, Verb


@dataclass(slots=True)
class Write:
    """One command's write, as its path (patch, delete, create) takes it to the API server."""

    api: KubeApi
    command: Command
    guards: tuple[FieldValue, ...]
    """The matched rule's `require` fields: not negotiable, whatever the preconditions say."""
    info: KindInfo
    conflicts: ConflictBudget
    attempts: int
    """How many reads in a row a write may find the object changed before it gives up."""
    path: str = field(init=False)
    patch_path: str = field(init=False)

    def __post_init__(self) -> None:
        t = self.command.target
        self.path = self.info.path(t.namespace, t.name)
        self.patch_path = self.path + ("/status" if self.command.verb is Verb.PATCH_STATUS else "")

    @property
    def tests(self) -> tuple[FieldValue, ...]:
        """What a patch tests: the rule's guards, then the command's preconditions."""
        return (*self.guards, *self.command.preconditions)

    async def read(self) -> dict[str, Any] | Finished:
        """The object as the API server has it now, or how the command ends: not-found, error."""
        answered = await self.api.get(self.path)
        if answered.answer is Answer.NOT_FOUND:
            return not_found(answered)
        document = answered.document() if answered.answer is Answer.OK else None
        if document is None:
            t = self.command.target
            return unreadable(f"{self.info.kind} {t.namespace}/{t.name}", answered)
        return document

    def send_patch(self, body: list[dict[str, Any]]) -> Coroutine[Any, Any, Answered]:
        """The request's coroutine itself (not awaited in one more: see KubeApi.request)."""
        return self.api.request("PATCH", self.patch_path, body=body, content_type=JSON_PATCH)

    def outside_policy(self, document: dict[str, Any]) -> Finished | None:
        broken = first_not_holding(document, self.guards)
        return None if broken is None else outside_policy(document, broken)

    def settled(self, document: dict[str, Any]) -> Finished | None:
        """How the object as read ends the command: outside the policy, already showing the
        change, or showing a precondition broken; None when the change is still to be made."""
        outside = self.outside_policy(document)
        if outside is not None:
            return outside
        if first_not_holding(document, self.command.changes) is None:
            return already_held(document)
        broken = first_not_holding(document, self.command.preconditions)
        return None if broken is None else precondition_broken(document, broken)
