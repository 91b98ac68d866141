"""The engine-upgrade scenarios' stack: the sandbox cluster, a real NATS server, and the watcher,
actuator and engine-upgrade services, each under the runtime harness in this event loop, exactly as
deployed (only the process boundary is missing). Observations read the emulator through
kubernetes-asyncio, never a service's own view."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral_actuator.config import ActuatorConfig
from corral_actuator.runner import main as actuator_main
from corral_bus import Bus
from corral_decision import BOOTSTRAP, DecisionRunner, service_main
from corral_engine_upgrade.service import DEFINITION, EngineUpgradeConfig
from corral_runtime.service import ServiceContext, serve
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import main as watcher_main
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import Sandbox

POLICY_FILE = Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml"
COMMON: dict[str, Any] = {
    "health_port": 0,
    "health_host": "127.0.0.1",
    "log_level": "warning",
    "lease_ttl_s": 2.0,
    "shutdown_grace_s": 5.0,
}


class Running:
    """One service under `serve` in a task; `ctx` once its main started, and for engine-upgrade its
    runner (`runner`), for tests that look at what a replica adopted or whether it took over."""

    def __init__(self, name: str, config: Any, main: Any, ready_when: list[str]) -> None:
        self.name = name
        self.ctx: ServiceContext[Any] | None = None
        self.runner: DecisionRunner | None = None

        async def body(ctx: ServiceContext[Any]) -> None:
            self.ctx = ctx
            await main(ctx)

        self.task = asyncio.create_task(serve(config, body, leader_election=True, ready_when=ready_when))

    def on_runner(self, runner: DecisionRunner) -> None:
        self.runner = runner

    @property
    def bootstrapped(self) -> bool:
        """Ready (a standby is, too); fails the test at once if the service exited."""
        if self.task.done():
            raise AssertionError(f"{self.name} exited early: {self.task.result()}")
        return self.ctx is not None and self.ctx.readiness.ready

    @property
    def ready(self) -> bool:
        """Ready and leading: the service is doing its work."""
        return self.bootstrapped and self.ctx is not None and self.ctx.is_leader

    async def stop(self) -> None:
        if self.ctx is not None:
            self.ctx.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.task, 30)


def watcher(kubeconfig: str, url: str) -> Running:
    config = {
        **COMMON,
        "service": "watcher",
        "instance": "w-1",
        "nats_url": url,
        "kubeconfig": kubeconfig,
        "kinds": ["volume", "replica", "engineimage", "node", "setting"],
    }
    return Running("watcher", msgspec.convert(config, WatcherConfig), watcher_main, [])


def actuator(kubeconfig: str, url: str) -> Running:
    config = {
        **COMMON,
        "service": "actuator",
        "instance": "a-1",
        "nats_url": url,
        "kubeconfig": kubeconfig,
        "policy_path": str(POLICY_FILE),
        "qps": 0.0,
        "ack_wait_s": 2.0,
        "audit_log": False,
        "settings_ttl_s": 0.0,
    }
    return Running("actuator", msgspec.convert(config, ActuatorConfig), actuator_main, ["policy"])


def engine_upgrade(url: str, instance: str = "eu-1") -> Running:
    config = {
        **COMMON,
        "service": "engine-upgrade",
        "instance": instance,
        "nats_url": url,
        "debounce_s": 0.01,
        "handover_delay_s": 0.0,
    }
    running: Running = Running(
        f"engine-upgrade {instance}",
        msgspec.convert(config, EngineUpgradeConfig),
        lambda ctx: service_main(DEFINITION, on_runner=running.on_runner)(ctx),
        [BOOTSTRAP],
    )
    return running


@pytest.fixture
async def stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    url = nats_server.url
    services = [watcher(kubeconfig, url), actuator(kubeconfig, url), engine_upgrade(url)]
    try:
        # Generous: the machine is shared, and three services import and connect at once.
        deadline = time.monotonic() + 120
        while not all(s.ready for s in services):
            if time.monotonic() > deadline:
                waiting = [s.name for s in services if not s.ready]
                raise AssertionError(f"not ready within 120 s: {waiting}")
            await asyncio.sleep(0.05)
        yield services
    finally:
        for service in reversed(services):
            await service.stop()
