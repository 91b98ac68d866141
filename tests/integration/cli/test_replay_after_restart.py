"""The bus's history outlives everything that made it: a wave runs (sandbox cluster, watcher,
actuator, engine-upgrade), then every service stops, NATS restarts from its file store, the services
start again, and `corral replay engine-upgrade --nats … --since <before the wave>` still makes
exactly the commands the live service made, read from LH_HISTORY alone (LH_COMMANDS was drained by
the actuator long before).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from corral_bus import Bus, connect
from corral_bus.setup import prepare_bus
from corral_cli.commands.events import parse_moment
from corral_model.subjects import HISTORY_STREAM
from corral_sandbox.simulator import SimConfig
from tests.fixtures.nats import BinaryNats, queued_commands
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.integration.cli.test_replay_wave import corral, replayed_ids, run_wave
from tests.scenarios.engine_upgrade.conftest import Running, actuator, engine_upgrade, watcher

pytestmark = [pytest.mark.integration, pytest.mark.real_nats]


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(live_upgrade_seconds=0.3, engine_image_deploy_seconds=0.2)


@pytest.fixture
def own_nats() -> Iterator[BinaryNats]:
    """A NATS server of this test's own, with a file store, that it may restart."""
    server = BinaryNats()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def admin(own_nats: BinaryNats) -> AsyncIterator[Bus]:
    bus = await connect(own_nats.url, name="test-admin")
    await prepare_bus(bus, attempts=40)  # the setup step, as `corral run` and the chart run it
    try:
        yield bus
    finally:
        await bus.close()


def start_services(sandbox: Sandbox, url: str) -> list[Running]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    return [watcher(kubeconfig, url), actuator(kubeconfig, url), engine_upgrade(url)]


async def stop_services(services: list[Running]) -> None:
    for service in reversed(services):
        await service.stop()


async def test_a_wave_replays_from_history_after_every_service_and_nats_restarted(
    sandbox: Sandbox, own_nats: BinaryNats, admin: Bus, capsys: Any
) -> None:
    before = parse_moment("0s")
    services = start_services(sandbox, own_nats.url)
    try:
        await eventually(lambda: all(s.ready for s in services), within=120, what="services ready")
        results = await run_wave(sandbox, admin)
    finally:
        await stop_services(services)
    live_ids = {r.command_id for r in results}
    assert live_ids

    kept = (await admin.js.stream_info(HISTORY_STREAM)).state.messages
    await asyncio.to_thread(own_nats.restart)
    await eventually(lambda: admin.is_connected, within=30, what="the test's client reconnected")

    async def history_back() -> bool:
        return (await admin.js.stream_info(HISTORY_STREAM)).state.messages >= kept

    await eventually(history_back, within=30, what="LH_HISTORY back from the file store")
    services = start_services(sandbox, own_nats.url)
    try:
        await eventually(lambda: all(s.ready for s in services), within=120, what="services ready again")
        assert await queued_commands(admin) == 0  # drained: only history
        capsys.readouterr()
        since = str(before / 1e9)
        status = await corral("replay", "engine-upgrade", "--nats", own_nats.url, "--since", since)
        out = capsys.readouterr().out
        assert status == 0, out
        assert replayed_ids(out) == live_ids, out
        assert f"diff: {len(live_ids)} same, 0 changed, 0 missing, 0 extra" in out, out
    finally:
        await stop_services(services)
