"""The layering the design promises, checked: libraries never import a service, the sandbox or the
CLI (the application on top), and a decision service's installed dependency tree holds no
Kubernetes client (it sees the cluster only through the bus).

What is above the libraries is discovered from the workspace (every member outside libs/), so a new
service is covered without naming it here."""

from __future__ import annotations

import ast
import importlib.metadata
import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from corral_decision import decision_services
from tests.unit.workspace import ROOT, workspace_members

LIBRARIES = "libs/"
ABOVE = sorted(p for m in workspace_members() if not m.where.startswith(LIBRARIES) for p in m.packages)
"""The packages of every member that is not a library: services, the sandbox, the CLI."""
ABOVE_LIBRARIES = re.compile(rf"^({'|'.join(map(re.escape, ABOVE))})\b")
KUBERNETES_CLIENTS = {"kubernetes-asyncio", "kubernetes"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_what_is_above_the_libraries_is_discovered() -> None:
    """The discovery can fail: it finds every service directory, the sandbox and the CLI."""
    services = {p.name.replace("-", "_") for p in (ROOT / "services").iterdir() if p.is_dir()}
    assert {f"corral_{s}" for s in services} | {"corral_sandbox", "corral_cli"} <= set(ABOVE)
    assert ABOVE_LIBRARIES.match("corral_watcher.runner") and not ABOVE_LIBRARIES.match("corral_bus")


def test_no_library_imports_a_service_the_sandbox_or_the_cli() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {module}"
        for path in sorted((ROOT / "libs").glob("*/src/**/*.py"))
        for module in sorted(imported_modules(path))
        if ABOVE_LIBRARIES.match(module)
    ]
    assert offenders == []


def dependency_tree(distribution: str) -> set[str]:
    """Every distribution `distribution` needs when installed (without optional extras)."""
    seen: set[str] = set()
    todo = [distribution]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            # Optional extras and other platforms' needs are not installed with the package.
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(requirement.name))
    return seen


@pytest.mark.parametrize("service", sorted(decision_services()))
def test_a_decision_service_carries_no_kubernetes_client(service: str) -> None:
    distribution = f"corral-{service}"
    tree = dependency_tree(distribution)
    assert "corral-decision" in tree  # the walk did reach its dependencies
    assert not tree & KUBERNETES_CLIENTS, sorted(tree)


def test_the_watcher_does_carry_one() -> None:
    """The check can fail: the watcher, which lists and watches the API server, has a client."""
    assert "kubernetes-asyncio" in dependency_tree("corral-watcher")
