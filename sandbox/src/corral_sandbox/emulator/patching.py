"""The three patch formats the apiserver accepts for JSON objects.

* JSON merge patch (RFC 7386): objects merge recursively, `null` deletes a key, anything else replaces.
  It is applied without mutating the original, sharing untouched sub-trees, so the old object stays
  available for generation and status comparisons at no copying cost.
* Strategic merge patch is treated as a merge patch (correct for custom resources; for built-in kinds it
  replaces lists that the real strategy would merge by key).
* JSON Patch (RFC 6902) including `test`; any failing operation aborts the whole patch.
"""

from __future__ import annotations

import copy
from typing import Any


class PatchError(Exception):
    """A JSON Patch operation that cannot be applied (failed `test`, missing path, bad index)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = value
    return result


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str):
        raise PatchError(f"path must be a string, got {path!r}")
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}: must start with '/'")
    return [_unescape(t) for t in path[1:].split("/")]


def _index(container: list[Any], token: str, path: str, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise PatchError(f"invalid array index {token!r} in {path}")
    i = int(token)
    limit = len(container) if allow_end else len(container) - 1
    if i > limit:
        raise PatchError(f"array index {i} out of bounds in {path}")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError(f"missing value at {path}")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, path, allow_end=False)]
        else:
            raise PatchError(f"cannot traverse a scalar at {path}")
    return cur


def _get(doc: Any, path: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"missing value at {path}")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, path, allow_end=False)]
    raise PatchError(f"cannot traverse a scalar at {path}")


def _add(doc: Any, path: Any, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, path, allow_end=True), value)
    else:
        raise PatchError(f"cannot add to a scalar at {path}")
    return doc


def _remove(doc: Any, path: Any) -> tuple[Any, Any]:
    tokens = _pointer(path)
    if not tokens:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"missing value at {path}")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, path, allow_end=False))
    raise PatchError(f"cannot remove from a scalar at {path}")


def _equal(a: Any, b: Any) -> bool:
    # JSON equality: 1 and 1.0 are the same number, but true is not 1.
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def json_patch(doc: Any, ops: Any) -> Any:
    """Apply RFC 6902 operations to `doc` IN PLACE (pass a private copy); returns the new document."""
    if not isinstance(ops, list):
        raise TypeError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    for op in ops:
        if not isinstance(op, dict):
            raise TypeError("json: cannot unmarshal a non-object operation into jsonpatch.Operation")
        kind = op.get("op")
        path = op.get("path")
        if kind == "add":
            doc = _add(doc, path, _value(op))
        elif kind == "remove":
            doc, _ = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)  # replace requires the target to exist
            if _pointer(path):
                doc, _ = _remove(doc, path)
            doc = _add(doc, path, _value(op))
        elif kind == "move":
            source = op.get("from")
            if isinstance(path, str) and isinstance(source, str) and path.startswith(source + "/"):
                raise PatchError(f"cannot move {source} into its own child {path}")
            doc, moved = _remove(doc, source)
            doc = _add(doc, path, moved)
        elif kind == "copy":
            doc = _add(doc, path, copy.deepcopy(_get(doc, op.get("from"))))
        elif kind == "test":
            try:
                got = _get(doc, path)
            except PatchError as e:
                raise PatchError(f"testing value {path} failed: {e}") from None
            if not _equal(got, _value(op)):
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"unexpected kind of operation: {kind!r}")
    return doc


def _value(op: dict[str, Any]) -> Any:
    if "value" not in op:
        raise PatchError(f"operation {op.get('op')} on {op.get('path')} is missing a value")
    return op["value"]
