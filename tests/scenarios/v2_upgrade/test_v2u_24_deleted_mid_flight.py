"""Issue 24: a NodeDataEngineUpgrade deleted mid-flight, after it failed its node's replicas and
moved its volumes' targets away, must not stall the upgrade. The prototype put the node back to
pending and created the next attempt within milliseconds; that attempt flagged the node
(`DataEngineUpgradeRequested`), the flag kept the degraded volumes from rebuilding, and the attempt
waited in `initializing` ("not healthy") for good, the manager `upgrading` with no error shown.

Here the node is released first: no attempt flags it until its volumes have rebuilt, then the next
attempt takes the volumes where the lost one left them and finishes. The manager ends `completed`,
every volume healthy and home, and the scenario invariants hold at every write.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade.crash import StateTrap
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver
from tests.scenarios.v2_upgrade.scenario import manager, node_upgrades, start_upgrade, state

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

VOLUMES = ("vol-1", "vol-2", "vol-3")


async def test_a_node_upgrade_deleted_in_switching_over_does_not_stall_the_upgrade(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    reached = asyncio.Event()
    trap = StateTrap(sandbox.emulator, "node", "switching-over", lambda _: reached.set())
    await start_upgrade(sandbox)

    async def switching_over() -> bool:
        return reached.is_set()

    await sandbox.wait_for(
        switching_over, within=60, what="node-1 in switching-over", invariant=observer.holds
    )
    [lost] = [u for u in await node_upgrades(sandbox, "node-1") if u["metadata"]["name"] == trap.caught]
    assert lost["spec"]["nodeID"] == "node-1"
    await sandbox.objects_api.delete_namespaced_custom_object(
        CORRAL_GROUP, CORRAL_VERSION, sandbox.namespace, NODE_UPGRADES, trap.caught
    )

    async def finished() -> dict[str, Any] | None:
        found = await manager(sandbox)
        return found if state(found) in ("completed", "error") else None

    final = await sandbox.wait_for(
        finished, within=120, interval=0.05, what="the manager to finish", invariant=observer.holds
    )
    status = final["status"]
    assert state(final) == "completed" and status["message"] == "3 of 3 nodes upgraded", status
    assert status["upgradeNodes"]["node-1"]["state"] == "completed", status["upgradeNodes"]["node-1"]
    attempts = await node_upgrades(sandbox, "node-1")
    assert trap.caught not in {u["metadata"]["name"] for u in attempts}
    assert state(attempts[-1]) == "completed", attempts[-1]["status"]
    for name in VOLUMES:
        volume = await sandbox.get("volumes", name)
        assert volume["status"]["state"] == "attached", volume["status"]
        assert volume["spec"].get("targetNodeIDForLiveUpgrade", "") == "", volume["spec"]
        await sandbox.wait_volume(
            name,
            lambda v: (v.get("status") or {}).get("robustness") == "healthy",
            within=30,
            what=f"{name} healthy",
        )
