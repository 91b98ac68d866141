"""V2U-22 (B): a node upgrade in progress whose NodeDataEngineUpgrade disappears while its controller
is down is reset to `pending` with its failed-attempt count kept, and then upgraded.

So that "kept" means something, node-1 has one failure behind it when it is orphaned: with
snapshot-before-upgrade on and a snapshot taking SNAPSHOT_S, longer than the node timeout, node-1's
first attempt times out in `initializing` (ended at once, nothing touched: `retries: 1`). Its second
attempt waits there for its own snapshots when the v2-upgrade service stops (the controller crash)
and the NodeDataEngineUpgrade is deleted. A new v2-upgrade replica (configured without a timeout, so
that only the orphan is under test from here on) finds node-1 in flight with its node upgrade gone:
it reports node-1 `pending` ("node upgrade resource not found; will start again") with `retries`
still 1, and the next attempt, a new object, upgrades node-1; node-2 and node-3 follow. The scenario
invariants hold at every write throughout.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION
from corral_sandbox.simulator import SimConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade.conftest import v2_upgrade
from tests.scenarios.v2_upgrade.crash import StateTrap, WriteTally
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver
from tests.scenarios.v2_upgrade.scenario import manager, node_upgrades, start_upgrade, state

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

TIMEOUT_S = 2.0
SNAPSHOT_S = 4.0
SETTINGS: dict[str, Any] = {"retry_backoff_s": 1.0, "snapshot_before_upgrade": True}


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(snapshot_seconds=SNAPSHOT_S)


@pytest.fixture
def v2_upgrade_settings() -> dict[str, Any]:
    return {**SETTINGS, "node_timeout_s": TIMEOUT_S}


@pytest.fixture
async def successor(nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    """Where the test keeps the v2-upgrade replica it starts after the crash, to stop it at the end."""
    started: list[Running] = []
    yield started
    for service in started:
        await service.stop()


async def test_an_orphaned_node_is_reset_to_pending_with_its_retries_kept_then_upgraded(
    sandbox: Sandbox,
    nats_server: NatsServer,
    stack: list[Running],
    observer: UpgradeObserver,
    successor: list[Running],
) -> None:
    tally = WriteTally(sandbox.emulator)
    second_attempt = asyncio.Event()
    trap = StateTrap(sandbox.emulator, "node", "initializing", lambda _: second_attempt.set(), nth=2)
    await start_upgrade(sandbox)

    async def orphan_due() -> bool:
        return second_attempt.is_set()

    await sandbox.wait_for(
        orphan_due, within=60, what="node-1's second attempt in initializing", invariant=observer.holds
    )
    first, orphan = trap.seen
    [decider] = [s for s in stack if s.ctx is not None and s.ctx.name == "v2-upgrade"]
    await decider.stop()  # the controller crash
    upgrades = {u["metadata"]["name"]: u for u in await node_upgrades(sandbox)}
    assert (state(upgrades[first]), upgrades[first]["status"].get("abortReason")) == ("error", "timeout")
    assert state(upgrades[orphan]) == "initializing", upgrades[orphan]["status"]
    assert (await manager(sandbox))["status"]["upgradeNodes"]["node-1"].get("retries") == 1
    await sandbox.objects_api.delete_namespaced_custom_object(
        CORRAL_GROUP, CORRAL_VERSION, sandbox.namespace, NODE_UPGRADES, orphan
    )
    successor.append(v2_upgrade(nats_server.url, "v2u-2", **SETTINGS))
    await eventually(lambda: successor[0].ready, within=120, what="the new v2-upgrade replica leading")

    async def reset() -> dict[str, Any] | None:
        entry: dict[str, Any] = (await manager(sandbox))["status"]["upgradeNodes"]["node-1"]
        return entry if entry.get("state") == "pending" else None

    entry = await sandbox.wait_for(reset, within=30, what="node-1 reset to pending", invariant=observer.holds)
    assert entry.get("retries") == 1, entry
    assert entry["message"] == "node upgrade resource not found; will start again", entry

    async def finished() -> dict[str, Any] | None:
        found = await manager(sandbox)
        return found if state(found) in ("completed", "error") else None

    final = await sandbox.wait_for(
        finished, within=90, interval=0.05, what="the manager to finish", invariant=observer.holds
    )
    status = final["status"]
    assert state(final) == "completed" and status["message"] == "3 of 3 nodes upgraded", status
    assert status["upgradeNodes"]["node-1"].get("retries") == 1, status["upgradeNodes"]["node-1"]
    assert tally.node_upgrades["node-1"] == 3  # timed out, orphaned, upgraded
    attempts = await node_upgrades(sandbox, "node-1")
    names = [u["metadata"]["name"] for u in attempts]
    assert len(names) == 2 and names[0] == first and orphan not in names, names
    assert state(attempts[-1]) == "completed", attempts[-1]["status"]
