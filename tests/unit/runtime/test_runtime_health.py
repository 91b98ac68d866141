"""/livez, /readyz and /metrics over real HTTP on a loopback port."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import Counter

from corral_runtime.health import HealthServer, Readiness
from corral_runtime.metrics import ServiceMetrics, new_registry


@pytest.fixture
async def served() -> AsyncIterator[tuple[HealthServer, aiohttp.ClientSession]]:
    registry = new_registry()
    server = HealthServer(Readiness(), registry, host="127.0.0.1", port=0)
    await server.start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as session:
            yield server, session
    finally:
        await server.stop()


async def test_livez_answers_while_not_ready(served: tuple[HealthServer, aiohttp.ClientSession]) -> None:
    server, session = served
    server.readiness.require("bootstrap")
    async with session.get("/livez") as response:
        assert response.status == 200
        assert await response.text() == "ok\n"


async def test_readyz_waits_for_every_condition(served: tuple[HealthServer, aiohttp.ClientSession]) -> None:
    server, session = served
    connected = False
    server.readiness.require("bootstrap")
    server.readiness.probe("nats", lambda: connected)

    async with session.get("/readyz") as response:
        assert response.status == 503
        assert await response.json() == {"ready": False, "conditions": {"bootstrap": False, "nats": False}}

    server.readiness.mark("bootstrap")
    async with session.get("/readyz") as response:
        assert response.status == 503
        assert (await response.json())["conditions"] == {"bootstrap": True, "nats": False}

    connected = True
    async with session.get("/readyz") as response:
        assert response.status == 200
        assert await response.json() == {"ready": True, "conditions": {"bootstrap": True, "nats": True}}

    connected = False  # a lost connection makes the service unready again, without anyone marking it
    async with session.get("/readyz") as response:
        assert response.status == 503


async def test_metrics_exposes_the_service_registry(
    served: tuple[HealthServer, aiohttp.ClientSession],
) -> None:
    server, session = served
    gauges = ServiceMetrics(server.registry, "engine-upgrade", "pod-a")
    gauges.ready.set_function(lambda: float(server.readiness.ready))
    commands = Counter("corral_commands_issued", "Commands published.", registry=server.registry)
    commands.inc(3)
    server.readiness.require("bootstrap")

    async with session.get("/metrics") as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    assert "corral_commands_issued_total 3.0" in text
    assert 'corral_service_info{instance="pod-a",service="engine-upgrade"} 1.0' in text
    assert "corral_ready 0.0" in text
    assert "process_cpu_seconds_total" in text

    server.readiness.mark("bootstrap")
    async with session.get("/metrics") as response:
        assert "corral_ready 1.0" in await response.text()


async def test_a_failing_probe_means_not_ready(served: tuple[HealthServer, aiohttp.ClientSession]) -> None:
    server, session = served

    def broken() -> bool:
        raise ConnectionError("no client yet")

    server.readiness.probe("nats", broken)
    async with session.get("/readyz") as response:
        assert response.status == 503
        assert await response.json() == {"ready": False, "conditions": {"nats": False}}


async def test_unknown_paths_are_404(served: tuple[HealthServer, aiohttp.ClientSession]) -> None:
    _, session = served
    async with session.get("/healthz") as response:
        assert response.status == 404
