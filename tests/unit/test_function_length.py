"""No function outside the tests is longer than 60 lines (issue 26, item 4).

A function that long holds several ideas; split into named steps, each reads as one decision. The
check walks the AST of every module under `services/*/src` and `libs/*/src` and names each offender
with its length, so a failure says exactly what to split. A nested function counts on its own and
within the function that holds it.

`KNOWN_LONG` names the functions still waiting to be split, each with the line count it had when
listed: one may only shrink, and an entry that is no longer needed fails too, so the list can only
get shorter until it is gone.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 60
SOURCE_TREES = ("services", "libs")

KNOWN_LONG: dict[str, int] = {}
"""`path::qualified name` → its length when listed (e.g. `"services/actuator/src/corral_actuator/
actuator.py::Actuator.execute": 75`, while a rewrite is under way). Empty now: every function is
split; remove an entry once its function is."""


def source_files() -> list[Path]:
    return sorted(path for tree in SOURCE_TREES for path in (ROOT / tree).glob("*/src/**/*.py"))


def function_lengths(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """Each function's qualified name and its length in lines, from `def` (or its first decorator)
    to its last line, docstring included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            yield prefix + node.name, node.end_lineno - first + 1
            yield from function_lengths(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from function_lengths(node, f"{prefix}{node.name}.")
        else:
            yield from function_lengths(node, prefix)


def long_functions() -> dict[str, int]:
    """Every function over MAX_LINES in the source trees: `path::qualified name` → its length."""
    found: dict[str, int] = {}
    for path in source_files():
        where = path.relative_to(ROOT).as_posix()
        for name, length in function_lengths(ast.parse(path.read_text(), filename=str(path))):
            if length > MAX_LINES:
                found[f"{where}::{name}"] = length
    return found


def test_no_function_is_longer_than_60_lines() -> None:
    too_long = {
        name: length
        for name, length in long_functions().items()
        if name not in KNOWN_LONG or length > KNOWN_LONG[name]
    }
    assert too_long == {}, "split these into named steps (lines each): " + ", ".join(
        f"{name} ({length})" for name, length in sorted(too_long.items())
    )


def test_the_known_long_ones_are_still_long() -> None:
    """An entry whose function was split (or renamed) must leave the list, so it only shrinks."""
    found = long_functions()
    stale = sorted(name for name in KNOWN_LONG if name not in found)
    assert stale == [], f"no longer over {MAX_LINES} lines, remove from KNOWN_LONG: {stale}"


def test_the_walk_sees_every_tree_and_measures_nested_functions() -> None:
    """The check can fail: it reaches the actuator (rewritten elsewhere, still covered) and the
    libraries, and counts a long inner function under its qualified name."""
    trees = {path.relative_to(ROOT).parts[:2] for path in source_files()}
    assert ("services", "actuator") in trees and ("libs", "decision") in trees
    body = "\n".join(f"            x = {i}" for i in range(MAX_LINES))
    module = f"class A:\n    def outer(self) -> None:\n        def inner() -> None:\n{body}\n"
    lengths = dict(function_lengths(ast.parse(module)))
    assert lengths["A.outer.inner"] == MAX_LINES + 1
    assert lengths["A.outer"] == MAX_LINES + 2
