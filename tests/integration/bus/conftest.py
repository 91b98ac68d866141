"""Runs the bus contract suite once per available NATS path (binary, and docker when reachable) and
once on the in-memory fake (tests/fixtures/fakebus), so the fake cannot drift from the real thing.
Tests marked `real_nats` get no fake variant (tests/fixtures/fake_nats.py deselects it)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.fake_nats import FAKE, nats_server_for
from tests.fixtures.nats import NatsServer, nats_modes


@pytest.fixture(scope="session", params=[*nats_modes(), FAKE])
def nats_server(request: pytest.FixtureRequest, _nats_servers: dict[str, Any]) -> NatsServer:
    return nats_server_for(request.param)
