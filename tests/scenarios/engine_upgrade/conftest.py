"""The engine-upgrade scenarios' stack: the sandbox cluster, a real NATS server, and the watcher,
actuator and engine-upgrade services, each under the runtime harness in this event loop, exactly as
deployed (only the process boundary is missing). Observations read the emulator through
kubernetes-asyncio, never a service's own view."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from opentelemetry.sdk.trace import TracerProvider

from corral_actuator.config import ActuatorConfig
from corral_actuator.runner import main as actuator_main
from corral_bus import Bus
from corral_engine_upgrade.service import DEFINITION
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import main as watcher_main
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import IN_LOOP, Running, all_leading, decision_replica

__all__ = ["Running", "actuator", "engine_upgrade", "stack", "watcher"]

POLICY_FILE = Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml"


ENGINE_UPGRADE_KINDS = ("volume", "replica", "engineimage", "node", "setting")


def watcher(
    kubeconfig: str,
    url: str,
    tracer_provider: TracerProvider | None = None,
    kinds: Iterable[str] = ENGINE_UPGRADE_KINDS,
) -> Running:
    """The watcher in the test's loop, watching `kinds` (every scenario suite's, by default
    engine-upgrade's)."""
    config = {
        **IN_LOOP,
        "service": "watcher",
        "instance": "w-1",
        "nats_url": url,
        "kubeconfig": kubeconfig,
        "kinds": list(kinds),
    }
    return Running("watcher", msgspec.convert(config, WatcherConfig), watcher_main, [], tracer_provider)


def actuator(
    kubeconfig: str, url: str, tracer_provider: TracerProvider | None = None, **settings: Any
) -> Running:
    """The actuator in this loop; `settings` override its configuration."""
    config = {
        **IN_LOOP,
        "service": "actuator",
        "instance": "a-1",
        "nats_url": url,
        "kubeconfig": kubeconfig,
        "policy_path": str(POLICY_FILE),
        "qps": 0.0,
        "ack_wait_s": 2.0,
        "audit_log": False,
        "settings_ttl_s": 0.0,
        **settings,
    }
    config_ = msgspec.convert(config, ActuatorConfig)
    return Running("actuator", config_, actuator_main, ["policy"], tracer_provider)


def engine_upgrade(
    url: str, instance: str = "eu-1", tracer_provider: TracerProvider | None = None, **settings: Any
) -> Running:
    return decision_replica(DEFINITION, url, instance, tracer_provider, handover_delay_s=0.0, **settings)


@pytest.fixture
async def stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    url = nats_server.url
    services = [watcher(kubeconfig, url), actuator(kubeconfig, url), engine_upgrade(url)]
    async with all_leading(services):
        yield services
