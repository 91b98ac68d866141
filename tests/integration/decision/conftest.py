"""The kit's handover tests run on a real NATS server (the preferred path) and on the in-memory
fake: what the kit guarantees must not depend on which one it stands on."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.fake_nats import FAKE, nats_server_for
from tests.fixtures.nats import NatsServer, preferred_mode


@pytest.fixture(scope="session", params=[preferred_mode(), FAKE])
def nats_server(request: pytest.FixtureRequest, _nats_servers: dict[str, Any]) -> NatsServer:
    return nats_server_for(request.param)
