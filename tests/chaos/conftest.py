"""The chaos suite's shared parts: a sandbox whose upgrades take long enough for a fault
to land mid-wave, and the session's chaos.json."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from corral_sandbox.seeds import Seed, default_seed, resized
from corral_sandbox.simulator import SimConfig
from tests.chaos.report import ChaosReport
from tests.fixtures.sandbox import fast_config


@pytest.fixture
def sandbox_seed() -> Seed:
    return resized(default_seed(), nodes=3, volumes=0)


@pytest.fixture
def sandbox_config() -> SimConfig:
    # A live upgrade of half a second: a wave of three rounds per node outlasts a fault's injection.
    return fast_config(live_upgrade_seconds=0.5)


@pytest.fixture(scope="session")
def chaos_report() -> Iterator[ChaosReport]:
    report = ChaosReport()
    yield report
    report.write()
