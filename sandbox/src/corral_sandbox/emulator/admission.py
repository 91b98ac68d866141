"""Admission hooks: how the simulator plays Longhorn's validating and mutating webhooks.

A validating hook `fn(operation, old, new) -> str | None` returns a denial message (or None to allow);
the request is refused the way kube-apiserver reports a webhook denial:
`admission webhook "<name>" denied the request: <message>`, with the hook's code, or with the code
the hook returns along with the message (`(422, message)`), as a webhook answering its own status
code does. A mutating hook
`fn(operation, old, new) -> dict | None` returns the object to store instead of `new` (or None to keep
it). Operations are CREATE, UPDATE and DELETE; hooks see copies they may not keep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from corral_sandbox.emulator.errors import ApiError

Validator = Callable[[str, dict[str, Any] | None, dict[str, Any] | None], str | tuple[int, str] | None]
Mutator = Callable[[str, dict[str, Any] | None, dict[str, Any] | None], dict[str, Any] | None]

_REASONS = {400: "BadRequest", 403: "Forbidden", 409: "Conflict", 422: "Invalid", 500: "InternalError"}


@dataclass(frozen=True, slots=True)
class ValidatingHook:
    fn: Validator
    name: str
    code: int
    include_status: bool

    def check(self, operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        denial = self.fn(operation, old, new)
        if denial is None:
            return
        code, message = denial if isinstance(denial, tuple) else (self.code, denial)
        raise ApiError(
            code,
            _REASONS.get(code, "BadRequest"),
            f'admission webhook "{self.name}" denied the request: {message}',
        )


@dataclass(frozen=True, slots=True)
class MutatingHook:
    fn: Mutator
    name: str
    include_status: bool


class Admission:
    """The hooks registered per (group, plural)."""

    def __init__(self) -> None:
        self.validating: dict[tuple[str, str], list[ValidatingHook]] = {}
        self.mutating: dict[tuple[str, str], list[MutatingHook]] = {}

    @property
    def hooked(self) -> bool:
        """Any hook at all (the common case in benchmarks is none, checked once per write)."""
        return bool(self.validating or self.mutating)

    def add_validating(self, group: str, plural: str, hook: ValidatingHook) -> None:
        self.validating.setdefault((group, plural), []).append(hook)

    def add_mutating(self, group: str, plural: str, hook: MutatingHook) -> None:
        self.mutating.setdefault((group, plural), []).append(hook)

    def has_hooks(self, key: tuple[str, str]) -> bool:
        return key in self.validating or key in self.mutating

    def mutate(
        self,
        key: tuple[str, str],
        operation: str,
        old: dict[str, Any] | None,
        new: dict[str, Any],
        status: bool,
    ) -> dict[str, Any]:
        for hook in self.mutating.get(key, ()):
            if status and not hook.include_status:
                continue
            changed = hook.fn(operation, old, new)
            if changed is not None:
                new = changed
        return new

    def validate(
        self,
        key: tuple[str, str],
        operation: str,
        old: dict[str, Any] | None,
        new: dict[str, Any] | None,
        status: bool,
    ) -> None:
        for hook in self.validating.get(key, ()):
            if status and not hook.include_status:
                continue
            hook.check(operation, old, new)
