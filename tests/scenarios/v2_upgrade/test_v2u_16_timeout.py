"""V2U-16 (B): a node whose relocation is stuck is aborted when its attempt times out, restored,
retried up to the bound, then failed for good, and the manager moves on and ends with a summary.

The simulator stalls node-2 as a switch-over target (SIM-FAULT stall: no v2 target can be
created there), so node-1's volumes, all
attached there, never finish moving to the temporary node node-2. Each of node-1's attempts then
runs out its `node_timeout_s`, is aborted with reason `timeout`, switched back to node-1 on the image
they had, and ends in `error` ("aborted (timeout) in switching-over; restored"); the manager counts
the failure and starts node-1 again, until `max_node_retries` failures mark it `error` for good.
node-2 and node-3 (their temporary node is node-1 or node-3, never stalled as a target) are then
upgraded, and the manager completes naming node-1 as failed. Every write is judged by the scenario
invariants throughout: one node at a time, no attached volume detached, I/O gaps within budget.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade.crash import WriteTally
from tests.scenarios.v2_upgrade.observer import UpgradeObserver
from tests.scenarios.v2_upgrade.scenario import manager, node_upgrades, start_upgrade, state

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

TIMEOUT_S = 4.0
RETRIES = 2


@pytest.fixture
def v2_upgrade_settings() -> dict[str, Any]:
    return {"retry_backoff_s": 1.0, "node_timeout_s": TIMEOUT_S, "max_node_retries": RETRIES}


async def test_a_stuck_relocation_times_out_is_restored_retried_then_failed_and_the_manager_moves_on(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    tally = WriteTally(sandbox.emulator)
    images = {v["metadata"]["name"]: v["spec"]["image"] for v in await sandbox.list("volumes")}
    sandbox.simulator.faults.block_target("node-2")
    await start_upgrade(sandbox)

    async def finished() -> dict[str, Any] | None:
        found = await manager(sandbox)
        return found if state(found) in ("completed", "error") else None

    final = await sandbox.wait_for(
        finished,
        within=RETRIES * 3 * TIMEOUT_S + 60,
        interval=0.05,
        what="the manager to finish",
        invariant=observer.holds,
    )
    status = final["status"]
    assert state(final) == "completed", status
    node_1 = status["upgradeNodes"]["node-1"]
    assert (node_1["state"], node_1["retries"]) == ("error", RETRIES), node_1
    assert status["message"].startswith("2 of 3 nodes upgraded; failed: node-1 ("), status["message"]
    assert f"failed {RETRIES} times" in status["message"]
    assert {n: status["upgradeNodes"][n]["state"] for n in ("node-2", "node-3")} == {
        "node-2": "completed",
        "node-3": "completed",
    }
    # node-1 was tried exactly RETRIES times, each attempt aborted by the timeout and restored.
    attempts = await node_upgrades(sandbox, "node-1")
    assert tally.node_upgrades["node-1"] == RETRIES == len(attempts)
    for attempt in attempts:
        got = attempt["status"]
        assert (got["state"], got.get("abortReason"), got.get("abortedIn")) == (
            "error",
            "timeout",
            "switching-over",
        ), got
        assert got["message"] == "aborted (timeout) in switching-over; restored", got
    # Restored: node-1's volumes serve from node-1 again, on the image they had (its old IM was
    # never deleted), with no live-upgrade target left.
    for volume in await sandbox.list("volumes"):
        if volume["spec"].get("dataEngine") != "v2" or volume["spec"].get("nodeID") != "node-1":
            continue
        assert volume["status"]["state"] == "attached", volume["status"]
        assert not volume["spec"].get("targetNodeIDForLiveUpgrade"), volume["spec"]
        assert volume["spec"]["image"] == images[volume["metadata"]["name"]], volume["spec"]
    assert tally.im_deletes.get("node-1", 0) == 0
