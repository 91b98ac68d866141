"""A leader handover with commands in flight, in the sandbox, through the whole stack.

Leader A publishes commands while the actuator is not running, so they wait in LH_COMMANDS and the
cluster shows nothing. A stops; B takes over, either as a warm standby that saw the commands go by
or started afterwards (it reads them from the queue). Then the actuator starts and applies A's
commands. B must have counted them: polling the emulator at every observation, in-flight upgrades
per owner node never exceed the limit, and the wave still finishes.
"""

from __future__ import annotations

import contextlib
from typing import cast

import pytest

from corral_bus import Bus
from corral_engine_upgrade.core import EngineUpgradeDecider
from corral_sandbox.simulator import SimConfig
from tests.fixtures.bus_traffic import commands_seen
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import Running, actuator, engine_upgrade, watcher
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer

pytestmark = pytest.mark.integration

LIMIT = 2
VOLUMES = [f"vol-{i}" for i in range(6)]
# Created after A's first wave, first in slot order: a new leader that does not count A's queued
# commands picks these (commands A never issued, so deduplication by id cannot hide the excess).
# Named so that node-1 owns them from the start: until it attaches, the simulator gives a new volume
# the ready node its name hashes to (simulator/volumes.py `_owner`), and a volume detached on another
# node is rightly upgraded offline there by whichever replica leads, which is not this test's point.
LATE = ["aaa-3", "aaa-5"]


@pytest.fixture
def sandbox_config() -> SimConfig:
    # Upgrades long enough that several observations fall inside each one.
    return fast_config(live_upgrade_seconds=1.0)


async def deploy_old_image(sandbox: Sandbox) -> None:
    await sandbox.deploy_engine_image(UPGRADE_IMAGE, within=20)


async def healthy_on_old_image(sandbox: Sandbox, names: list[str]) -> None:
    for name in names:
        await sandbox.create_volume(name, replicas=2, image=UPGRADE_IMAGE, node="node-1")
    for name in names:
        await sandbox.wait_volume(
            name,
            lambda v: v.get("status", {}).get("robustness") == "healthy",
            within=20,
            what=f"{name} healthy",
        )


@pytest.mark.parametrize("standby", ["warm", "cold"])
async def test_a_new_leader_counts_its_predecessors_queued_commands(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer, standby: str
) -> None:
    url, kubeconfig = nats_server.url, str(sandbox.cluster.kubeconfig_path)
    await deploy_old_image(sandbox)
    await healthy_on_old_image(sandbox, VOLUMES)
    observer = Observer(sandbox)
    limit_holds = observer.limit_holds(LIMIT)
    services: list[Running] = []
    try:
        services.append(watcher(kubeconfig, url))
        a = engine_upgrade(url, "eu-a")
        services.append(a)
        await eventually(lambda: a.ready, within=60, what="engine-upgrade A to lead")
        b: Running | None = None
        if standby == "warm":
            warm = b = engine_upgrade(url, "eu-b")
            services.append(warm)
            await eventually(lambda: warm.bootstrapped, within=60, what="the standby B to bootstrap")

        async with commands_seen(bus, "engine-upgrade") as seen:
            await sandbox.set_setting(LIMIT_SETTING, str(LIMIT))

            async def a_commanded() -> bool:
                return len(seen) >= LIMIT

            await eventually(a_commanded, within=20, what="A's first wave")
            first_wave = {c.target.name for _, c in seen}
            assert len(first_wave) == LIMIT
            # No actuator yet: the commands wait in LH_COMMANDS, the cluster shows nothing.
            assert (await observer.in_flight()) == {}
            await healthy_on_old_image(sandbox, LATE)

            await a.stop()
            assert a.task.done(), "A did not stop"
            if b is None:
                b = engine_upgrade(url, "eu-b")
                services.append(b)
            new_leader = b
            await eventually(lambda: new_leader.ready, within=60, what="B to lead")
            runner = new_leader.runner
            assert runner is not None

            async def taken_over() -> bool:
                return bool(runner._taken_over)

            await eventually(taken_over, within=30, what="B to catch up with the bus")
            # B counts A's queued commands: its view of node-1 is full, so it commands nothing more.
            assert cast("EngineUpgradeDecider", runner.decider).in_flight_by_node() == {"node-1": LIMIT}

            async def nothing_new() -> bool:
                return {c.target.name for _, c in seen} == first_wave

            await sandbox.stays(nothing_new, 1.0, what="B issuing nothing while A's commands are queued")

            services.append(actuator(kubeconfig, url))

            async def all_done() -> bool:
                return await observer.all_on(DEFAULT_IMAGE, set(VOLUMES + LATE))

            await sandbox.wait_for(
                all_done,
                within=90,
                interval=0.02,
                what="every volume on the default image",
                invariant=limit_holds,
            )
        assert observer.max_in_flight["node-1"] == LIMIT, "the wave never used both slots"
        assert runner.metrics.adopted._value.get() >= LIMIT
    finally:
        for service in reversed(services):
            with contextlib.suppress(Exception):
                await service.stop()
