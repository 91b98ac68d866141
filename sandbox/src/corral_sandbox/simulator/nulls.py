"""`NULL`: a literal JSON `null` the simulated controllers write, as Longhorn's do for a nil Go map on
a field its CRD marks `nullable: true` (a stopped Engine's `status.replicaModeMap`).

The simulator's writes are merge patches (RFC 7386), where a `null` means "delete the key", so a
reconciler's wanted dict keeps `None` for that and says `NULL` for the literal value. A patch
holding a `NULL` cannot travel as a merge patch; `as_json_patch` turns it into an RFC 6902 patch
against the object as observed before the round (`Write.observed`): one `add` (or `remove`) per
top-level field of the patched section, each carrying the field's whole merged value, which is
what the merge patch would have produced with the nulls kept. Longhorn's controllers write the
whole status (UpdateStatus); this writes only the fields the round changed.
"""

from __future__ import annotations

import copy
from typing import Any


class _Null:
    def __repr__(self) -> str:
        return "NULL"

    def __deepcopy__(self, memo: dict[int, Any]) -> _Null:
        return self


NULL: Any = _Null()


def has_null(value: Any) -> bool:
    """Whether a (merge-patch) body holds a `NULL` anywhere."""
    if value is NULL:
        return True
    if isinstance(value, dict):
        return any(has_null(v) for v in value.values())
    if isinstance(value, list):
        return any(has_null(v) for v in value)
    return False


def materialize(value: Any, null: Any = None) -> Any:
    """`value` with every `NULL` replaced by `null` (a JSON null by default)."""
    if value is NULL:
        return null
    if isinstance(value, dict):
        return {k: materialize(v, null) for k, v in value.items()}
    if isinstance(value, list):
        return [materialize(v, null) for v in value]
    return value


def merged(current: Any, patch: Any) -> Any:
    """What the merge patch `patch` makes of `current`, a `NULL` kept as a JSON null."""
    if isinstance(patch, dict) and isinstance(current, dict):
        out = copy.deepcopy(current)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = merged(out.get(key), value)
        return out
    if isinstance(patch, dict):
        return merged({}, patch)
    return materialize(patch)


def _pointer(*tokens: str) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


def as_json_patch(body: dict[str, Any], observed: dict[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 patch that does to `observed` what the merge patch `body` means, nulls kept."""
    ops: list[dict[str, Any]] = []
    for section, patch in body.items():
        held = observed.get(section)
        if not isinstance(patch, dict) or not isinstance(held, dict):
            if patch is None:
                if section in observed:
                    ops.append({"op": "remove", "path": _pointer(section)})
            else:
                ops.append({"op": "add", "path": _pointer(section), "value": merged(held, patch)})
            continue
        for key, value in patch.items():
            if value is None:
                if key in held:
                    ops.append({"op": "remove", "path": _pointer(section, key)})
            else:
                ops.append(
                    {"op": "add", "path": _pointer(section, key), "value": merged(held.get(key), value)}
                )
    return ops
