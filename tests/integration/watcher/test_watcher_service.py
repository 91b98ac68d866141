"""`python -m corral_watcher` as deployed: configured from the environment, ready once synced,
publishing, exposing its metrics, and leaving cleanly on SIGTERM."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client

from corral_bus import Bus
from corral_model.subjects import object_subject
from corral_sandbox.emulator import Emulator
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import ServiceProcess, free_port, python_module
from tests.integration.watcher.support import (
    NAMESPACE,
    Volumes,
    mismatches,
    stream_history,
    until_no_problems,
)

pytestmark = pytest.mark.integration


async def get(session: aiohttp.ClientSession, url: str) -> tuple[int, str]:
    try:
        async with session.get(url) as response:
            return response.status, await response.text()
    except aiohttp.ClientError as e:
        return 0, str(e)


async def test_service_publishes_reports_ready_and_stops_on_sigterm(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus, nats_server: NatsServer, tmp_path: Path
) -> None:
    volumes = Volumes(kube_api)
    await volumes.create("vol-0")
    port = free_port()
    env = {
        "CORRAL_NATS_URL": nats_server.url,
        "CORRAL_KUBECONFIG": str(emulator.kubeconfig_path),
        "CORRAL_NAMESPACE": NAMESPACE,
        "CORRAL_KINDS": "volume,setting,engine",
        "CORRAL_HEALTH_HOST": "127.0.0.1",
        "CORRAL_HEALTH_PORT": str(port),
        "CORRAL_INACTIVITY_TIMEOUT_S": "5",
    }
    watcher = ServiceProcess("watcher", python_module("corral_watcher"), env, tmp_path)
    await watcher.start()
    try:
        async with aiohttp.ClientSession() as session:

            async def not_ready() -> list[str]:
                status, body = await get(session, f"http://127.0.0.1:{port}/readyz")
                return [] if status == 200 else [f"/readyz {status}: {body[:200]}"]

            await until_no_problems(not_ready, within=30, what="watcher ready")
            await volumes.create("vol-1")

            async def behind() -> list[str]:
                return mismatches(emulator, await stream_history(bus))

            await until_no_problems(behind, within=30, what="both volumes on the bus")
            status, metrics = await get(session, f"http://127.0.0.1:{port}/metrics")
            assert status == 200
            assert 'corral_watcher_events_published_total{kind="volume",type="ADDED"} 2.0' in metrics
            assert 'corral_watcher_relists_total{kind="engine",reason="initial"} 1.0' in metrics
        assert await watcher.terminate(within=20) == 0, watcher.output()
    finally:
        await watcher.kill()
    history = await stream_history(bus)
    assert any(s.subject == object_subject("volume", NAMESPACE, "vol-1") for s in history)
