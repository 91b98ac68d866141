"""The explorer's pytest side: the whole matrix (`test_matrix.py`, marked `explore`) runs only when
asked for (`pytest -m explore`), and then writes bench/results/explore.json at the end of the
session; `make test` runs the sample (`test_sample.py`) alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.report import write_report
from tests.explore.__main__ import figures
from tests.explore.model import Verdict


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "explore" in str(config.getoption("markexpr") or ""):
        return
    matrix = [item for item in items if item.get_closest_marker("explore") is not None]
    if matrix:
        config.hook.pytest_deselected(items=matrix)
        items[:] = [item for item in items if item.get_closest_marker("explore") is None]


@pytest.fixture(scope="session")
def explore_report() -> Iterator[list[Verdict]]:
    verdicts: list[Verdict] = []
    yield verdicts
    if verdicts:
        write_report("explore", figures(verdicts))
