"""No function in the actuator's source is over 60 lines (issue 26).

A command's path from `execute` to the write is read by whoever has to say why a write happened or
did not; each function is one step of it. Counted from the first decorator to the last line,
docstring and comments included, as a reader scrolls it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "services" / "actuator" / "src"
MAX_LINES = 60


def long_functions(source: str, name: str) -> list[str]:
    """ "<name>:<line> <function> (<lines> lines)" for each function longer than MAX_LINES."""
    found = []
    for node in ast.walk(ast.parse(source, filename=name)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = (node.end_lineno or node.lineno) - first + 1
            if lines > MAX_LINES:
                found.append(f"{name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_the_measure_sees_a_long_function_and_its_decorator() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 2))
    at_limit = f"@staticmethod\ndef f() -> None:\n{body}"
    assert long_functions(at_limit, "m.py") == []
    assert long_functions(at_limit + "    y = 0\n", "m.py") == [f"m.py:2 f ({MAX_LINES + 1} lines)"]


def test_no_actuator_function_is_over_60_lines() -> None:
    paths = sorted(SOURCE.rglob("*.py"))
    assert paths, f"no source under {SOURCE}"
    offenders = [
        found for path in paths for found in long_functions(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert offenders == []
