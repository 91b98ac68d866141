"""V2U-19 (B): the temporary node holding a relocated volume's target loses its v2 instance manager.

* With another node able to take the target (three nodes: node-3 holds a healthy replica of every
  volume), the volumes are moved on to it and the node upgrade carries on to `completed`, with no
  abort.
* With none (two nodes: the only other node is the one that lost its IM), the attempt is aborted at
  once with reason `temporary-node-lost` and the volumes restored to the upgrading node, long before
  the node timeout (an hour here: a scenario of seconds cannot have waited for it); once node-2's IM
  is back, the restore finishes and the retry upgrades the node.

Losing the IM that serves a volume's target is a crash: the volume cannot serve (SIM-IO reason
`target-im-gone`) until its target is somewhere else. That interval is the fault's cost, not a
switch-over's, so the observer judges every other gap against the switch-over budget as in every
scenario, and the crash's gaps only by their end: each must be closed (the volume serving again)
when the upgrade is over, and no volume is ever detached.

The IM stays down (SIM-CRASH) until the test revives it: in the first case once the volumes moved on
(node-2 has its own upgrade to do), in the second once the abort started (the restore rebuilds the
volumes' replicas from the ones on node-2).

The IM is killed (SIM-CRASH) while node-1 is in `upgrading-instance-manager`, its volumes' targets on
the temporary node node-2; the trap that says so fires inside the API server (crash.StateTrap), and
node-1's new IM takes a second to start (`v2_im_startup_seconds`), so the kill lands in that state.
The scenario invariants hold at every write: one node at a time, no attached volume detached.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from corral_sandbox.seeds.model import Seed
from corral_sandbox.simulator import SimConfig
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade.crash import StateTrap
from tests.scenarios.v2_upgrade.io_ledger import io_budget, ledger
from tests.scenarios.v2_upgrade.observer import UpgradeObserver
from tests.scenarios.v2_upgrade.scenario import (
    NEW_IM,
    NODES,
    create_manager,
    manager,
    node_upgrades,
    pull_image,
    set_target_image,
    settled,
    state,
    v2_seed,
    v2_volume,
)

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

HOUR = 3600.0


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(v2_im_startup_seconds=1.0)


CRASH = "target-im-gone"


@pytest.fixture
async def observer(sandbox: Sandbox) -> UpgradeObserver:
    """The scenario observer, its I/O-gap rule blind to the gaps the injected crash caused."""

    async def switch_over_gaps() -> dict[str, list[float]]:
        return {
            name: [g["seconds"] for g in entry["gaps"] if CRASH not in g["reasons"]]
            for name, entry in ledger(sandbox).items()
        }

    return UpgradeObserver(sandbox, io_gaps=switch_over_gaps, io_budget=io_budget(sandbox))


def crash_gaps_closed(sandbox: Sandbox) -> None:
    """Every gap the crash caused has ended, and no volume was detached."""
    for name, entry in ledger(sandbox).items():
        assert all(g["end"] is not None for g in entry["gaps"] if CRASH in g["reasons"]), (name, entry)
        assert entry["detaches"] == 0, (name, entry)


@pytest.fixture
def v2_upgrade_settings() -> dict[str, Any]:
    return {"retry_backoff_s": 1.0, "node_timeout_s": HOUR}


async def kill_temporary_node_im_in_upgrading_instance_manager(
    sandbox: Sandbox, nodes: tuple[str, ...] = NODES
) -> str:
    """Start the upgrade of `nodes`; once node-1 is in upgrading-instance-manager, kill the v2 IM of
    the node its volumes moved to, and return that node."""
    reached = asyncio.Event()
    StateTrap(sandbox.emulator, "node", "upgrading-instance-manager", lambda _: reached.set())
    await settled(sandbox)
    await pull_image(sandbox, NEW_IM, nodes)
    await set_target_image(sandbox, NEW_IM)
    await create_manager(sandbox)
    await asyncio.wait_for(reached.wait(), 60)
    targets = {
        v["spec"].get("targetNodeIDForLiveUpgrade")
        for v in await sandbox.list("volumes")
        if v["spec"].get("dataEngine") == "v2" and v["spec"].get("nodeID") == "node-1"
    }
    assert len(targets) == 1 and "" not in targets and None not in targets, targets
    [temporary] = targets
    sandbox.simulator.faults.kill_v2_instance_manager(str(temporary))
    return str(temporary)


async def finished(sandbox: Sandbox, observer: UpgradeObserver) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        found = await manager(sandbox)
        return found if state(found) in ("completed", "error") else None

    return await sandbox.wait_for(
        probe, within=90, interval=0.05, what="the manager to finish", invariant=observer.holds
    )


class TestAnotherNodeTakesTheTarget:
    async def test_the_volumes_move_on_and_the_node_upgrade_completes(
        self, sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
    ) -> None:
        lost = await kill_temporary_node_im_in_upgrading_instance_manager(sandbox)
        assert lost == "node-2"
        seen: set[str] = set()

        async def moved_on() -> bool:
            targets = {
                str(v["spec"].get("targetNodeIDForLiveUpgrade") or "")
                for v in await sandbox.list("volumes")
                if v["spec"].get("dataEngine") == "v2" and v["spec"].get("nodeID") == "node-1"
            }
            seen.update(targets)
            return "node-3" in seen

        await sandbox.wait_for(
            moved_on, within=30, what="the targets moved on to node-3", invariant=observer.holds
        )
        sandbox.simulator.faults.revive_v2_instance_manager(lost)  # node-2 has its own upgrade to do
        final = await finished(sandbox, observer)
        assert state(final) == "completed" and final["status"]["message"] == "3 of 3 nodes upgraded"
        crash_gaps_closed(sandbox)
        [attempt] = await node_upgrades(sandbox, "node-1")
        assert state(attempt) == "completed" and not attempt["status"].get("abortReason"), attempt["status"]


class TestNoNodeCanTakeIt:
    @pytest.fixture
    def sandbox_seed(self) -> Seed:
        return v2_seed([v2_volume(f"vol-{i}", replicas=2) for i in (1, 2)], nodes=2)

    async def test_the_attempt_is_aborted_at_once_restored_then_retried(
        self, sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
    ) -> None:
        lost = await kill_temporary_node_im_in_upgrading_instance_manager(sandbox, ("node-1", "node-2"))
        assert lost == "node-2"

        async def aborted() -> dict[str, Any] | None:
            attempts = await node_upgrades(sandbox, "node-1")
            return attempts[0] if attempts and attempts[0]["status"].get("abortReason") else None

        await sandbox.wait_for(aborted, within=30, what="node-1's attempt aborted", invariant=observer.holds)
        # The IM's pod comes back (its replicas there are what the restore rebuilds from).
        sandbox.simulator.faults.revive_v2_instance_manager(lost)
        final = await finished(sandbox, observer)
        first, *rest = await node_upgrades(sandbox, "node-1")
        got = first["status"]
        assert (got["state"], got.get("abortReason"), got.get("abortedIn")) == (
            "error",
            "temporary-node-lost",
            "upgrading-instance-manager",
        ), got
        assert got["message"] == "aborted (temporary-node-lost) in upgrading-instance-manager; restored"
        # the retry upgraded the node once node-2's IM was back
        assert [state(u) for u in rest] == ["completed"], [u["status"] for u in rest]
        assert state(final) == "completed" and final["status"]["message"] == "2 of 2 nodes upgraded"
        assert final["status"]["upgradeNodes"]["node-1"]["retries"] == 1
        crash_gaps_closed(sandbox)
