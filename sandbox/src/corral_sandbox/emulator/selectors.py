"""Label and field selectors, parsed once per request and matched per object.

Label selectors follow the apiserver grammar (`a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x,y)`,
`a`, `!a`). Field selectors match `metadata.name` / `metadata.namespace` without decoding the object;
any other dotted path (e.g. `spec.nodeName`, `status.phase`) is looked up in the decoded object, which is
more lenient than the apiserver (it refuses unsupported fields per kind) but never matches wrongly.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from corral_sandbox.emulator.errors import bad_request

_SET_RE = re.compile(r"^\s*(\S+)\s+(in|notin)\s+\((.*)\)\s*$")
_KEY_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?$")

LabelTest = Callable[[Mapping[str, str]], bool]


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside a `( … )` value set."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _key(key: str, selector: str) -> str:
    if not _KEY_RE.match(key):
        raise bad_request(f"unable to parse requirement: invalid label key {key!r} in selector {selector!r}")
    return key


def _label_requirement(req: str, selector: str) -> LabelTest:
    m = _SET_RE.match(req)
    if m:
        key = _key(m.group(1), selector)
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        if m.group(2) == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    for op in ("!=", "==", "="):
        if op in req:
            k, _, v = req.partition(op)
            key, value = _key(k.strip(), selector), v.strip()
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: labels.get(key) == value
    if req.startswith("!"):
        key = _key(req[1:].strip(), selector)
        return lambda labels: key not in labels
    key = _key(req, selector)
    return lambda labels: key in labels


@dataclass(frozen=True, slots=True)
class LabelSelector:
    tests: tuple[LabelTest, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        got = labels or {}
        return all(t(got) for t in self.tests)


def parse_label_selector(text: str | None) -> LabelSelector | None:
    if not text or not text.strip():
        return None
    return LabelSelector(tuple(_label_requirement(r, text) for r in _split_top_level(text)))


def _lookup(obj: Mapping[str, Any], path: str) -> str | None:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return None if cur is None else str(cur)


@dataclass(frozen=True, slots=True)
class FieldSelector:
    name: tuple[str, bool] | None  # (value, equal?) for metadata.name
    namespace: tuple[str, bool] | None
    others: tuple[tuple[str, str, bool], ...]  # (path, value, equal?) needing the decoded object

    @property
    def needs_object(self) -> bool:
        return bool(self.others)

    def matches_key(self, namespace: str, name: str) -> bool:
        if self.name is not None and (name == self.name[0]) != self.name[1]:
            return False
        return not (self.namespace is not None and (namespace == self.namespace[0]) != self.namespace[1])

    def matches_object(self, obj: Mapping[str, Any]) -> bool:
        for path, value, equal in self.others:
            got = _lookup(obj, path)
            # An absent field reads as "" the way the apiserver's field sets do.
            if ((got or "") == value) != equal:
                return False
        return True


def parse_field_selector(text: str | None) -> FieldSelector | None:
    if not text or not text.strip():
        return None
    name = namespace = None
    others: list[tuple[str, str, bool]] = []
    for req in _split_top_level(text):
        for op in ("!=", "==", "="):
            if op in req:
                path, _, value = req.partition(op)
                path, value = path.strip(), value.strip()
                equal = op != "!="
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{req}'")
        if not path:
            raise bad_request(f"invalid selector: '{text}'")
        if path == "metadata.name":
            name = (value, equal)
        elif path == "metadata.namespace":
            namespace = (value, equal)
        else:
            others.append((path, value, equal))
    return FieldSelector(name, namespace, tuple(others))


__all__ = ["FieldSelector", "LabelSelector", "parse_field_selector", "parse_label_selector"]
