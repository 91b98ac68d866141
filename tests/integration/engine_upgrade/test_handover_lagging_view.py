"""A takeover while the new leader's view lags the cluster: the watcher is down, so LH_OBJECTS does
not show the upgrades the actuator has just started, and LH_COMMANDS no longer holds their commands
(the actuator took and acknowledged them). Only LH_RESULTS knows: `applied`, with the volume's new
resourceVersion. A replica started now must not decide from its stale view: it waits until its view
shows those writes (the watcher is back), and the limit holds at every observation of the emulator.

Volumes that sort first are created after the old leader's wave (it holds their node full), so a
new leader deciding from the stale view would command those, not repeat the old leader's commands
(which JetStream would drop as duplicates).
"""

from __future__ import annotations

import contextlib
from typing import cast

import pytest

from corral_bus import Bus
from corral_engine_upgrade.core import EngineUpgradeDecider
from corral_model.envelopes import Outcome
from corral_model.subjects import RESULTS_STREAM
from corral_sandbox.simulator import SimConfig
from tests.fixtures.bus_traffic import commands_seen
from tests.fixtures.nats import NatsServer, queued_commands
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox, fast_config
from tests.integration.engine_upgrade.test_handover import (
    deploy_old_image,
    healthy_on_old_image,
)
from tests.scenarios.engine_upgrade.conftest import Running, actuator, engine_upgrade, watcher
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer

pytestmark = pytest.mark.integration
LIMIT = 2
VOLUMES = [f"vol-{i}" for i in range(4)]
LATE = ["aaa-3", "aaa-5"]  # owned by node-1 from the start (see test_handover.LATE)


@pytest.fixture
def sandbox_config() -> SimConfig:
    # Upgrades that outlast the whole takeover, so a wrongly issued command would overlap them.
    return fast_config(live_upgrade_seconds=6.0)


async def test_a_new_leader_waits_for_the_writes_the_actuator_reported(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer
) -> None:
    url, kubeconfig = nats_server.url, str(sandbox.cluster.kubeconfig_path)
    await deploy_old_image(sandbox)
    await healthy_on_old_image(sandbox, VOLUMES)
    observer = Observer(sandbox)
    limit_holds = observer.limit_holds(LIMIT)
    services: list[Running] = []
    try:
        the_watcher = watcher(kubeconfig, url)
        services.append(the_watcher)
        a = engine_upgrade(url, "eu-a")
        services.append(a)
        await eventually(lambda: a.ready, within=60, what="engine-upgrade A to lead")
        async with commands_seen(bus, "engine-upgrade") as seen:
            await sandbox.set_setting(LIMIT_SETTING, str(LIMIT))

            async def a_commanded() -> bool:
                return len(seen) >= LIMIT

            await eventually(a_commanded, within=20, what="A's first wave")
            first_wave = {c.target.name for _, c in seen}
            await healthy_on_old_image(sandbox, LATE)

            async def late_in_view() -> bool:
                assert a.runner is not None
                view = cast("EngineUpgradeDecider", a.runner.decider).view
                views = [view.volume(sandbox.namespace, name) for name in LATE]
                return all(v is not None and v.robustness == "healthy" for v in views)

            await eventually(late_in_view, within=20, what="the new volumes healthy in LH_OBJECTS")
            # The watcher goes away; then the actuator applies A's commands: the cluster shows two
            # upgrades running, LH_OBJECTS does not, and LH_COMMANDS is empty again.
            await the_watcher.stop()
            assert the_watcher.task.done(), "the watcher did not stop"
            services.remove(the_watcher)
            services.append(actuator(kubeconfig, url))

            async def applied() -> bool:
                info = await bus.js.stream_info(RESULTS_STREAM)
                return info.state.messages >= LIMIT and await queued_commands(bus) == 0

            await sandbox.wait_for(applied, within=30, what="A's commands applied", invariant=limit_holds)
            assert {n for n, c in (await observer.in_flight()).items() if c} == {"node-1"}
            await a.stop()
            assert a.task.done(), "A did not stop"

            b = engine_upgrade(url, "eu-b")  # a new replica: it never saw A's commands
            services.append(b)
            await eventually(lambda: b.ready, within=60, what="B to lead")

            async def nothing_new() -> bool:
                await limit_holds()
                return {c.target.name for _, c in seen} == first_wave

            await sandbox.stays(nothing_new, 2.0, what="B deciding nothing from its stale view")
            assert b.runner is not None and not b.runner._taken_over
            assert [r.outcome for r in b.runner.seen.writes()] == [Outcome.APPLIED] * LIMIT

            the_watcher = watcher(
                str(sandbox.cluster.kubeconfig_path), url
            )  # back: B's view catches up, B takes over
            services.append(the_watcher)

            async def all_done() -> bool:
                return await observer.all_on(DEFAULT_IMAGE, set(VOLUMES + LATE))

            await sandbox.wait_for(
                all_done,
                within=90,
                interval=0.02,
                what="every volume on the default image",
                invariant=limit_holds,
            )
            assert b.runner._taken_over
        assert observer.max_in_flight["node-1"] == LIMIT
    finally:
        for service in reversed(services):
            with contextlib.suppress(Exception):
                await service.stop()
