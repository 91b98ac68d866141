"""Loads every fixture module under tests/fixtures/ as a pytest plugin, so fixtures are shared
without one file that every part of the project must edit."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import pytest

# Fixture modules import each other (e.g. nats.py uses processes.free_port); registering the package
# up front lets pytest rewrite asserts in whichever of them is imported first.
pytest.register_assert_rewrite("tests.fixtures")

pytest_plugins = [
    f"tests.fixtures.{m.name}" for m in pkgutil.iter_modules([str(Path(__file__).parent / "fixtures")])
]
