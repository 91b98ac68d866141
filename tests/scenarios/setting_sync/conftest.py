"""The danger-zone scenarios' stack: the sandbox cluster (with its Kubernetes workloads, scheduler and
setting webhooks), a real NATS server, and the watcher, actuator, setting-sync and im-restart
services in this event loop, as deployed. Observations read the API server's store (the emulator's
oracle), never a service's own view."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral_bus import Bus
from corral_im_restart.service import DEFINITION as IM_RESTART
from corral_sandbox.simulator import SimConfig
from corral_setting_sync.service import DEFINITION as SETTING_SYNC
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.fixtures.services import Running, all_leading, decision_replica
from tests.scenarios.engine_upgrade.conftest import actuator
from tests.scenarios.engine_upgrade.conftest import watcher as kinds_watcher

KINDS = ["volume", "setting", "instancemanager", "pod", "daemonset", "deployment", "node", "kubenode"]


def watcher(kubeconfig: str, url: str) -> Running:
    return kinds_watcher(kubeconfig, url, kinds=KINDS)


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(pod_startup_seconds=0.02)


@pytest.fixture
async def stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    url = nats_server.url
    services = [
        watcher(kubeconfig, url),
        actuator(kubeconfig, url),
        decision_replica(SETTING_SYNC, url, "ss-1", handover_delay_s=0.0),
        decision_replica(IM_RESTART, url, "im-1", handover_delay_s=0.0),
    ]
    async with all_leading(services):
        yield services
