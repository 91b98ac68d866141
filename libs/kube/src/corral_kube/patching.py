"""JSON pointers and JSON Patches: how a command's field-level preconditions reach the API server.

A command says "these paths must still hold these values; set those paths to those values". As a
JSON Patch (RFC 6902) that is a list of `test` operations followed by `add`/`replace`/`remove`
operations, applied atomically by the API server: an unrelated change to the object never
conflicts, and a stale decision fails its `test` (a 422) instead of being applied.

Two things a bare JSON Patch cannot say are handled with a snapshot of the object (a fresh GET):
* "this path is absent" (a precondition whose value is None): JSON Patch has no negative test, so
  absence is checked on the snapshot and the patch tests the snapshot's resourceVersion instead;
* setting a path whose parent objects do not exist yet: the patch first adds the missing parents.

Everything here is pure: values in, values out.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from corral_model.envelopes import FieldValue

JsonPatch = list[dict[str, Any]]


class PointerError(ValueError):
    """A string that is not a JSON pointer (RFC 6901)."""


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final = _Missing()
"""What `resolve` returns for a path that does not exist in the object."""


def escape(token: str) -> str:
    """Escape one reference token: `longhorn.io/x` → `longhorn.io~1x`."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


@functools.lru_cache(maxsize=8192)
def tokens(path: str) -> tuple[str, ...]:
    """The unescaped reference tokens of `path` ("" is the whole document).

    Cached: commands name the same few dozen paths over and over.
    """
    if path == "":
        return ()
    if not path.startswith("/"):
        raise PointerError(f"JSON pointer {path!r} must start with '/'")
    raw = path[1:].split("/")
    for token in raw:
        # A '~' not followed by 0 or 1 is invalid per RFC 6901.
        i = token.find("~")
        while i != -1:
            if i + 1 >= len(token) or token[i + 1] not in "01":
                raise PointerError(f"JSON pointer {path!r} has an invalid escape in {token!r}")
            i = token.find("~", i + 2)
    return tuple(unescape(t) for t in raw)


def pointer(parts: Iterable[str]) -> str:
    return "".join("/" + escape(p) for p in parts)


def _child(node: Any, token: str) -> Any:
    if isinstance(node, Mapping):
        return node.get(token, MISSING)
    if isinstance(node, Sequence) and not isinstance(node, str | bytes):
        if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
            return MISSING
        index = int(token)
        return node[index] if index < len(node) else MISSING
    return MISSING


def resolve(document: Any, path: str) -> Any:
    """The value at `path`, or MISSING."""
    node = document
    for token in tokens(path):
        node = _child(node, token)
        if node is MISSING:
            return MISSING
    return node


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True != 1 and "1" != 1 (Python's == conflates bool and int)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def holds(document: Any, field: FieldValue) -> bool:
    """Whether `document` has `field.value` at `field.path`; a None value means "absent".

    An explicit JSON null also counts as absent, as Kubernetes itself treats them alike.
    """
    actual = resolve(document, field.path)
    if field.value is None:
        return actual is MISSING or actual is None
    return actual is not MISSING and json_equal(actual, field.value)


def first_not_holding(document: Any, fields: Iterable[FieldValue]) -> FieldValue | None:
    """The first field whose value differs in `document` (None when they all hold)."""
    for field in fields:
        if not holds(document, field):
            return field
    return None


def describe_mismatch(document: Any, field: FieldValue, *, expected_is_public: bool = False) -> str:
    """Which field broke `field`, never the value it holds: results are read by every reader of
    the bus, and an object's fields are not theirs to see. `expected_is_public`: the expected value
    is the policy's (a published file), not a sender's, and may be named."""
    actual = resolve(document, field.path)
    wanted = "absent" if field.value is None else repr(field.value)
    if actual is MISSING:
        state = "absent"
    elif field.value is None:
        state = "present"
    else:
        state = "another value"
    if expected_is_public:
        return f"{field.path}: {state}; the policy requires {wanted}"
    return f"{field.path}: {state}, not what the command expected"


def needs_snapshot(preconditions: Iterable[FieldValue]) -> bool:
    """A precondition "absent" cannot be a JSON Patch `test`: it is checked on a fresh GET."""
    return any(p.value is None for p in preconditions)


def _is_index(token: str) -> bool:
    return token.isdigit() or token == "-"


def _set_op(path: str, value: Any, parent: Any) -> dict[str, Any]:
    last = tokens(path)[-1] if path else ""
    if isinstance(parent, list) or (parent is MISSING and _is_index(last)):
        # `add` on an array index inserts; replacing the element is what "set" means.
        return {"op": "replace", "path": path, "value": value}
    return {"op": "add", "path": path, "value": value}


def json_patch(
    changes: Sequence[FieldValue],
    preconditions: Sequence[FieldValue] = (),
    *,
    snapshot: Mapping[str, Any] | None = None,
) -> JsonPatch:
    """The JSON Patch that applies `changes` provided `preconditions` still hold.

    Without a snapshot, every precondition becomes a `test` (none may be "absent": see
    `needs_snapshot`) and changes assume their parents exist. With a snapshot (the object as last
    read), preconditions are assumed checked against it by the caller, the patch tests the
    snapshot's resourceVersion instead (so nothing can change in between), missing parents of a
    change are created, and removing an already absent path is skipped.
    """
    ops: JsonPatch = []
    if snapshot is None:
        for p in preconditions:
            if p.value is None:
                raise ValueError(f"precondition {p.path} 'absent' needs a snapshot of the object")
            ops.append({"op": "test", "path": p.path, "value": p.value})
        for c in changes:
            if c.value is None:
                ops.append({"op": "remove", "path": c.path})
            else:
                ops.append(_set_op(c.path, c.value, MISSING))
        return ops

    resource_version = resolve(snapshot, "/metadata/resourceVersion")
    if isinstance(resource_version, str) and resource_version:
        ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version})
    # Later changes see the parents earlier ones created: track paths created within this patch.
    created: set[str] = set()
    for c in changes:
        parts = tokens(c.path)
        if c.value is None:
            if resolve(snapshot, c.path) is not MISSING:
                ops.append({"op": "remove", "path": c.path})
            continue
        for depth in range(1, len(parts)):
            prefix = pointer(parts[:depth])
            if prefix in created or resolve(snapshot, prefix) is not MISSING:
                continue
            if isinstance(resolve(snapshot, pointer(parts[: depth - 1])), list):
                # A missing array element is not a parent to invent: let the server refuse the path.
                break
            ops.append({"op": "add", "path": prefix, "value": {}})
            created.add(prefix)
        parent_path = pointer(parts[:-1])
        parent = {} if parent_path in created else resolve(snapshot, parent_path)
        ops.append(_set_op(c.path, c.value, parent))
        created.add(c.path)
    return ops


def subset_holds(expected: Any, actual: Any) -> bool:
    """Whether every field of `expected` is in `actual` with the same value (objects recursively).

    Used for creates: an object that already exists "holds" the create when it has everything the
    command's body asked for (the server adds defaults and status of its own).
    """
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            k in actual and subset_holds(v, actual[k]) for k, v in expected.items()
        )
    return json_equal(expected, actual)
