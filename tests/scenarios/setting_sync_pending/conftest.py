"""The setting-sync scenarios' stack: the sandbox cluster, a real NATS server, and the watcher,
actuator and setting-sync services, each under the runtime harness in this event loop, exactly as
deployed (only the process boundary is missing). Observations read the emulator through
kubernetes-asyncio, never a service's own view."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral_bus import Bus
from corral_setting_sync.core import READS
from corral_setting_sync.service import DEFINITION
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running, all_leading, decision_replica
from tests.scenarios.engine_upgrade.conftest import actuator
from tests.scenarios.engine_upgrade.conftest import watcher as kinds_watcher

__all__ = ["Running", "stack"]


def watcher(kubeconfig: str, url: str) -> Running:
    return kinds_watcher(kubeconfig, url, kinds=sorted(READS))


def setting_sync(url: str, instance: str = "ss-1", **settings: Any) -> Running:
    return decision_replica(DEFINITION, url, instance, handover_delay_s=0.0, **settings)


@pytest.fixture
async def stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    url = nats_server.url
    services = [watcher(kubeconfig, url), actuator(kubeconfig, url), setting_sync(url)]
    async with all_leading(services):
        yield services
