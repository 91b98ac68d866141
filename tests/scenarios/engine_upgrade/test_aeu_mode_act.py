"""engine-upgrade beside a Longhorn whose own loop is off, as the chart deploys it (mode act, the
behaviour of the default mode auto once Longhorn's limit setting is 0): the wave runs end to end
through the actuator, which then holds corral's own per-node limit, not Longhorn's 0."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from corral_bus import Bus
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox
from tests.fixtures.services import Running, all_leading
from tests.scenarios.engine_upgrade.conftest import actuator, engine_upgrade, watcher
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer
from tests.scenarios.engine_upgrade.test_aeu_rules import COMPAT, create, engine_image, settled

pytestmark = pytest.mark.integration

OWN_LIMIT = 1


@pytest.fixture
async def acting_stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    kubeconfig, url = str(sandbox.cluster.kubeconfig_path), nats_server.url
    services = [
        watcher(kubeconfig, url),
        actuator(kubeconfig, url, per_node_limit=OWN_LIMIT),
        engine_upgrade(url, mode="act", per_node_limit=OWN_LIMIT),
    ]
    async with all_leading(services):
        yield services


async def test_a_wave_with_longhorns_loop_off_runs_on_corrals_own_limit(
    sandbox: Sandbox, acting_stack: list[Running]
) -> None:
    await sandbox.set_setting(LIMIT_SETTING, "0")  # Longhorn's own automatic upgrade is off
    await engine_image(sandbox, COMPAT)
    for name, node in (("vol-1", "node-1"), ("vol-2", "node-1"), ("vol-3", "")):
        await create(sandbox, name, node=node)
    await settled(sandbox, "vol-1", "attached")
    await settled(sandbox, "vol-2", "attached")
    await settled(sandbox, "vol-3", "detached")
    observer = Observer(sandbox)
    await sandbox.wait_for(
        lambda: observer.all_on(DEFAULT_IMAGE, {"vol-1", "vol-2", "vol-3"}),
        within=60,
        what="every volume on the default image, corral's limit of 1 per owner node",
        invariant=observer.limit_holds(OWN_LIMIT),
    )
