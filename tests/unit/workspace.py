"""The uv workspace as the root pyproject.toml declares it: its members, their distribution names and
the packages each ships. Tests discover services and libraries from here instead of naming them."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def root_pyproject() -> dict[str, Any]:
    loaded: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return loaded


@dataclass(frozen=True)
class Member:
    """One workspace member: a directory with a pyproject.toml and its packages under src/."""

    directory: Path
    distribution: str
    """The project name (`corral-engine-upgrade`)."""

    @property
    def where(self) -> str:
        return self.directory.relative_to(ROOT).as_posix()

    @property
    def packages(self) -> list[str]:
        """The import packages it ships (`corral_engine_upgrade`)."""
        return sorted(p.name for p in (self.directory / "src").iterdir() if (p / "__init__.py").is_file())


def workspace_members() -> list[Member]:
    """Every member the `[tool.uv.workspace] members` globs match, by directory."""
    members = []
    for pattern in root_pyproject()["tool"]["uv"]["workspace"]["members"]:
        for directory in sorted(ROOT.glob(pattern)):
            if (directory / "pyproject.toml").is_file():
                project = tomllib.loads((directory / "pyproject.toml").read_text())["project"]
                members.append(Member(directory, project["name"]))
    return members
