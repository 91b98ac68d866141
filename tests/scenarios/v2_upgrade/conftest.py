"""The v2-upgrade scenarios' stack: the sandbox cluster (with its v2 data plane, SIM-V2 and SIM-IO),
a real NATS server, and the watcher, actuator and v2-upgrade services in this event loop, exactly
as deployed but for the process boundary (the engine-upgrade scenarios' pattern).

The watcher watches what v2-upgrade reads (`V2_KINDS`: its two CRs, Longhorn and Kubernetes
nodes, volumes, engines, replicas, instance managers, settings, snapshots). Every scenario gets an
`UpgradeObserver` (observer.py) whose admission hooks judge every write inside the API server
against the invariants of invariants.py; the stack fails the test on any violation at teardown,
and scenarios pass `observer.holds` as the `invariant=` of each wait so a violation stops them at
the first observation after it.

A module overrides `sandbox_seed` (its volumes, labels), `sandbox_config` (simulated durations) or
`v2_upgrade_settings` (`node_timeout_s`, `snapshot_before_upgrade`…) to shape its scenario.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral_bus import Bus
from corral_sandbox.seeds.model import Seed
from corral_sandbox.simulator import SimConfig
from corral_v2_upgrade.core import READS
from corral_v2_upgrade.service import DEFINITION
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.fixtures.services import Running, all_leading, decision_replica
from tests.scenarios.engine_upgrade.conftest import actuator
from tests.scenarios.engine_upgrade.conftest import watcher as kinds_watcher
from tests.scenarios.v2_upgrade.io_ledger import io_budget, io_gaps
from tests.scenarios.v2_upgrade.observer import UpgradeObserver
from tests.scenarios.v2_upgrade.scenario import v2_seed, v2_volume

V2_KINDS = tuple(sorted(READS))
"""Every kind v2-upgrade reads, so the watcher publishes all of them."""


def watcher(kubeconfig: str, url: str) -> Running:
    return kinds_watcher(kubeconfig, url, kinds=V2_KINDS)


def v2_upgrade(url: str, instance: str = "v2u-1", **settings: Any) -> Running:
    return decision_replica(DEFINITION, url, instance, handover_delay_s=0.0, **settings)


@pytest.fixture
def sandbox_seed() -> Seed:
    """The §5.4 fixture, small: three v2 nodes, three v2 volumes attached on node-1 with a replica
    on every node."""
    return v2_seed([v2_volume(f"vol-{i}") for i in (1, 2, 3)])


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config()


@pytest.fixture
def v2_upgrade_settings() -> dict[str, Any]:
    """Overridden by a module to configure the v2-upgrade replica (timeouts, snapshots…)."""
    return {"retry_backoff_s": 1.0}


@pytest.fixture
async def observer(sandbox: Sandbox) -> UpgradeObserver:
    return UpgradeObserver(sandbox, io_gaps=io_gaps(sandbox), io_budget=io_budget(sandbox))


@pytest.fixture
async def stack(
    sandbox: Sandbox,
    bus: Bus,
    nats_server: NatsServer,
    observer: UpgradeObserver,
    v2_upgrade_settings: dict[str, Any],
) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    url = nats_server.url
    services = [watcher(kubeconfig, url), actuator(kubeconfig, url), v2_upgrade(url, **v2_upgrade_settings)]
    async with all_leading(services):
        yield services
    await observer.holds()
