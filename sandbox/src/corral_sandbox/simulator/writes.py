"""What a reconcile round asks for: creates, merge patches (spec/metadata or the status subresource)
and deletes, plus the merge-patch diff that turns an observed object into the wanted one.

Reconcilers say what they want an object to look like; `merge_diff` turns that into the smallest
RFC 7386 merge patch, so a round with nothing to change writes nothing, and unrelated fields written
by corral or a test are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from corral_sandbox.simulator.nulls import NULL, materialize

Verb = Literal["create", "patch", "status", "delete"]


@dataclass(frozen=True)
class Write:
    verb: Verb
    kind: str
    name: str
    body: dict[str, Any] | None = None
    reason: str = ""
    # for delete: the object must still have this uid (a Kubernetes delete precondition)
    uid: str = field(default="", compare=False)
    # for patch/status: the object as observed before the round changed it locally (see context.py);
    # put back into the view when the server refuses the write, so the view never shows a change the
    # server does not hold
    observed: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def record(self) -> dict[str, Any]:
        """The deterministic part of a write, for the replay log."""
        body = materialize(self.body, null="<null>")
        return {"verb": self.verb, "kind": self.kind, "name": self.name, "body": body}


def merge_diff(old: Any, new: Any) -> Any:
    """The merge patch taking `old` to `new` (dicts recurse; anything else is replaced).

    Returns `_SAME` when nothing differs, so callers can tell "no patch" from "patch to null". A
    `NULL` in `new` (a literal null, nulls.py) is the same as a null held in `old`.
    """
    if new is NULL:
        return _SAME if old is None else NULL
    if isinstance(old, dict) and isinstance(new, dict):
        patch: dict[str, Any] = {}
        for key, value in new.items():
            if key not in old:
                patch[key] = value
                continue
            sub = merge_diff(old[key], value)
            if sub is not _SAME:
                patch[key] = sub
        for key in old:
            if key not in new:
                patch[key] = None
        return patch if patch else _SAME
    return _SAME if old == new else new


class _Same:
    def __repr__(self) -> str:
        return "<same>"


_SAME: Any = _Same()


def diff_fields(old: dict[str, Any], wanted: dict[str, Any]) -> dict[str, Any] | None:
    """A merge patch setting only the keys in `wanted` (others untouched); None if all already hold.

    `None` in `wanted` deletes the key; `NULL` makes it a literal null (nulls.py).
    """
    patch: dict[str, Any] = {}
    for key, value in wanted.items():
        if value is NULL:
            if key not in old or old[key] is not None:
                patch[key] = NULL
            continue
        if value is None:
            if key in old and old[key] is not None:
                patch[key] = None
            continue
        if key not in old:
            patch[key] = value
            continue
        sub = merge_diff(old[key], value)
        if sub is not _SAME:
            patch[key] = sub
    return patch or None
