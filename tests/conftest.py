"""Loads every fixture module under tests/fixtures/ as a pytest plugin, so fixtures are shared
without one file that every part of the project must edit."""

from __future__ import annotations

import pkgutil
from pathlib import Path

pytest_plugins = [
    f"tests.fixtures.{m.name}" for m in pkgutil.iter_modules([str(Path(__file__).parent / "fixtures")])
]
