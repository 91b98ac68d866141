"""A leader handover with commands in flight, in the sandbox, through the whole stack.

Leader A publishes commands while the actuator is not running, so they wait in LH_COMMANDS and the
cluster shows nothing. A stops; B takes over, either as a warm standby that saw the commands go by
or started afterwards (it reads them from the queue). Then the actuator starts and applies A's
commands. B must have counted them: polling the emulator at every observation, in-flight upgrades
per owner node never exceed the limit, and the wave still finishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from nats.aio.msg import Msg

from corral_actuator.config import ActuatorConfig
from corral_actuator.runner import main as actuator_main
from corral_bus import Bus
from corral_engine_upgrade.runner import BOOTSTRAP, EngineUpgradeConfig, EngineUpgradeRunner
from corral_engine_upgrade.runner import main as engine_upgrade_main
from corral_model import codec
from corral_model.envelopes import Command
from corral_runtime.service import ServiceContext, serve
from corral_sandbox.simulator import SimConfig
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import main as watcher_main
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox, fast_config
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer

pytestmark = pytest.mark.integration

POLICY_FILE = Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml"
COMMON: dict[str, Any] = {
    "health_port": 0,
    "health_host": "127.0.0.1",
    "log_level": "warning",
    "lease_ttl_s": 2.0,
    "shutdown_grace_s": 5.0,
}
LIMIT = 2
VOLUMES = [f"vol-{i}" for i in range(6)]
# Created after A's first wave, first in slot order: a new leader that does not count A's queued
# commands picks these (commands A never issued, so deduplication by id cannot hide the excess).
LATE = ["aaa-0", "aaa-1"]


@pytest.fixture
def sandbox_config() -> SimConfig:
    # Upgrades long enough that several observations fall inside each one.
    return fast_config(live_upgrade_seconds=1.0)


class Running:
    """One service under the runtime harness in this event loop (as deployed, minus the process)."""

    def __init__(self, name: str, config: Any, main: Any, ready_when: list[str]) -> None:
        self.name = name
        self.ctx: ServiceContext[Any] | None = None
        self.runner: EngineUpgradeRunner | None = None

        async def body(ctx: ServiceContext[Any]) -> None:
            self.ctx = ctx
            if main is engine_upgrade_main:
                await main(ctx, on_runner=self._on_runner)
            else:
                await main(ctx)

        self.task = asyncio.create_task(serve(config, body, leader_election=True, ready_when=ready_when))

    def _on_runner(self, runner: EngineUpgradeRunner) -> None:
        self.runner = runner

    async def leading(self) -> bool:
        if self.task.done():
            raise AssertionError(f"{self.name} exited early: {self.task.result()}")
        return self.ctx is not None and self.ctx.readiness.ready and self.ctx.is_leader

    async def ready(self) -> bool:
        if self.task.done():
            raise AssertionError(f"{self.name} exited early: {self.task.result()}")
        return self.ctx is not None and self.ctx.readiness.ready

    async def stop(self) -> None:
        if self.ctx is not None:
            self.ctx.stop.set()
        if not self.task.done():
            await asyncio.wait_for(self.task, 30)


def watcher(sandbox: Sandbox, url: str) -> Running:
    config = msgspec.convert(
        {
            **COMMON,
            "service": "watcher",
            "instance": "w-1",
            "nats_url": url,
            "kubeconfig": str(sandbox.cluster.kubeconfig_path),
            "kinds": ["volume", "replica", "engineimage", "node", "setting"],
        },
        WatcherConfig,
    )
    return Running("watcher", config, watcher_main, [])


def actuator(sandbox: Sandbox, url: str) -> Running:
    config = msgspec.convert(
        {
            **COMMON,
            "service": "actuator",
            "instance": "a-1",
            "nats_url": url,
            "kubeconfig": str(sandbox.cluster.kubeconfig_path),
            "policy_path": str(POLICY_FILE),
            "qps": 0.0,
            "ack_wait_s": 2.0,
            "audit_log": False,
            "settings_ttl_s": 0.0,
        },
        ActuatorConfig,
    )
    return Running("actuator", config, actuator_main, ["policy"])


def engine_upgrade(url: str, instance: str) -> Running:
    config = msgspec.convert(
        {**COMMON, "service": "engine-upgrade", "instance": instance, "nats_url": url, "debounce_s": 0.01},
        EngineUpgradeConfig,
    )
    return Running(f"engine-upgrade {instance}", config, engine_upgrade_main, [BOOTSTRAP])


@contextlib.asynccontextmanager
async def commands_seen(bus: Bus) -> AsyncIterator[list[Command]]:
    seen: list[Command] = []

    async def on_message(msg: Msg) -> None:
        seen.append(codec.decode(msg.data, Command))

    sub = await bus.nc.subscribe("lh.cmd.engine-upgrade.>", cb=on_message)
    try:
        yield seen
    finally:
        await sub.unsubscribe()


async def deploy_old_image(sandbox: Sandbox) -> None:
    await sandbox.create_engine_image(UPGRADE_IMAGE)

    async def deployed() -> bool:
        ei: dict[str, Any] = await sandbox.engine_image(UPGRADE_IMAGE)
        return bool(ei.get("status", {}).get("state") == "deployed")

    await sandbox.wait_for(deployed, within=20, what=f"{UPGRADE_IMAGE} deployed")


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


async def wait(probe: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("standby", ["warm", "cold"])
async def test_a_new_leader_counts_its_predecessors_queued_commands(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer, standby: str
) -> None:
    url = nats_server.url
    await deploy_old_image(sandbox)
    await healthy_on_old_image(sandbox, VOLUMES)
    observer = Observer(sandbox)
    limit_holds = observer.limit_holds(LIMIT)
    services: list[Running] = []
    try:
        services.append(watcher(sandbox, url))
        a = engine_upgrade(url, "eu-a")
        services.append(a)
        await wait(a.leading, 60, "engine-upgrade A to lead")
        b: Running | None = None
        if standby == "warm":
            b = engine_upgrade(url, "eu-b")
            services.append(b)
            await wait(b.ready, 60, "the standby B to bootstrap")

        async with commands_seen(bus) as seen:
            await sandbox.set_setting(LIMIT_SETTING, str(LIMIT))

            async def a_commanded() -> bool:
                return len(seen) >= LIMIT

            await wait(a_commanded, 20, "A's first wave")
            first_wave = {c.target.name for c in seen}
            assert len(first_wave) == LIMIT
            # No actuator yet: the commands wait in LH_COMMANDS, the cluster shows nothing.
            assert (await observer.in_flight()) == {}
            await healthy_on_old_image(sandbox, LATE)

            await a.stop()
            if b is None:
                b = engine_upgrade(url, "eu-b")
                services.append(b)
            new_leader = b
            await wait(new_leader.leading, 60, "B to lead")
            runner = new_leader.runner
            assert runner is not None

            async def taken_over() -> bool:
                return bool(runner._taken_over)

            await wait(taken_over, 30, "B to catch up with the bus")
            # B counts A's queued commands: its view of node-1 is full, so it commands nothing more.
            assert runner.decider.in_flight_by_node() == {"node-1": LIMIT}

            async def nothing_new() -> bool:
                return {c.target.name for c in seen} == first_wave

            await sandbox.stays(nothing_new, 1.0, what="B issuing nothing while A's commands are queued")

            services.append(actuator(sandbox, url))

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
