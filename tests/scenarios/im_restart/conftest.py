"""The im-restart scenarios' stack: the sandbox cluster, a real NATS server, and the watcher,
actuator and im-restart services in this event loop, exactly as deployed but for the process
boundary (the engine-upgrade scenarios' pattern). The simulated IM controller leaves failed pods
to corral here (`im_delete_failed_pods=False`): deciding that is im-restart's part of `handlePod`.

Every scenario gets an `ImObserver` whose admission hooks judge each IM pod delete inside the API
server (scenario.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral_bus import Bus
from corral_im_restart.service import DEFINITION
from corral_sandbox.simulator import SimConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.fixtures.services import Running, all_leading, decision_replica
from tests.scenarios.engine_upgrade.conftest import actuator
from tests.scenarios.engine_upgrade.conftest import watcher as kinds_watcher
from tests.scenarios.im_restart.scenario import ImObserver

IM_KINDS = ["instancemanager", "pod", "setting", "node", "kubenode"]


def watcher(kubeconfig: str, url: str) -> Running:
    return kinds_watcher(kubeconfig, url, kinds=IM_KINDS)


def im_restart(url: str, instance: str = "imr-1", **settings: Any) -> Running:
    return decision_replica(DEFINITION, url, instance, handover_delay_s=0.0, **settings)


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(im_delete_failed_pods=False, im_recreate_backoff_seconds=0.05)


@pytest.fixture
def im_restart_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Overridden by a module, or parametrized indirectly by a test, to configure the im-restart
    replica (limits, settle…)."""
    return dict(getattr(request, "param", {}))


@pytest.fixture
async def observer(sandbox: Sandbox) -> ImObserver:
    return ImObserver(sandbox)


@pytest.fixture
async def stack(
    sandbox: Sandbox,
    bus: Bus,
    nats_server: NatsServer,
    observer: ImObserver,
    im_restart_settings: dict[str, Any],
) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    url = nats_server.url
    services = [watcher(kubeconfig, url), actuator(kubeconfig, url), im_restart(url, **im_restart_settings)]
    async with all_leading(services):
        yield services
    assert not observer.violations, "\n".join(observer.violations)
