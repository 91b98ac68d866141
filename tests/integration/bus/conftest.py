"""Runs the bus contract suite once per available NATS path (binary, and docker when reachable)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.nats import NatsServer, nats_modes, server_for


@pytest.fixture(scope="session", params=nats_modes())
def nats_server(request: pytest.FixtureRequest, _nats_servers: dict[str, Any]) -> NatsServer:
    return server_for(request.param)
