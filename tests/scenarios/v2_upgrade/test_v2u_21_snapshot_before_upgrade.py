"""V2U-21 (B): snapshot before upgrade (acceptance-scenarios.md §5.4).

* Off (the default): no snapshot is taken, none recorded.
* On (`CORRAL_SNAPSHOT_BEFORE_UPGRADE`): in `initializing`, one snapshot per attached volume of the
  node, labelled with the node upgrade; it is ready (`readyToUse`, the checksum done) before the
  volume's target is first moved, and its name is recorded in the node upgrade's status.
* Toggled mid-flight (the service restarted with it on while node-1 upgrades): the node in
  progress keeps what it was created with (none), the nodes after it take snapshots.

One volume per node, so every node's upgrade has a volume to snapshot.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.seeds.model import Seed
from corral_v2_upgrade.view import FOR_UPGRADE_LABEL
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.conftest import v2_upgrade
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver


@pytest.fixture
def sandbox_seed() -> Seed:
    return scenario.v2_seed([scenario.v2_volume(f"vol-{n}", owner=n) for n in scenario.NODES])


@pytest.fixture
def v2_upgrade_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    on = request.function.__name__ == "test_on_a_ready_snapshot_precedes_the_relocation"
    return {"retry_backoff_s": 1.0, "snapshot_before_upgrade": on}


def final(observer: UpgradeObserver, node: str) -> dict[str, Any]:
    [created] = [u for u in observer.created(NODE_UPGRADES) if u["spec"]["nodeID"] == node]
    return observer.versions(NODE_UPGRADES, created["metadata"]["name"])[-1]


def ready_before_relocation(observer: UpgradeObserver, snapshot: str, volume: str) -> bool:
    """The snapshot was `readyToUse` before the volume's target was first set."""
    ready = False
    for write in observer.writes:
        if write.plural == "snapshots" and write.name == snapshot and write.new is not None:
            ready = ready or bool((write.new.get("status") or {}).get("readyToUse"))
        moved = write.new is not None and write.new["spec"].get("targetNodeIDForLiveUpgrade")
        if write.plural == "volumes" and write.name == volume and moved:
            return ready
    raise AssertionError(f"{volume}'s target was never moved")


async def test_off_no_snapshot(sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver) -> None:
    await scenario.start_upgrade(sandbox)
    await scenario.wait_manager(sandbox, observer, "completed", within=120)
    assert observer.created("snapshots") == []
    for node in scenario.NODES:
        upgrade = final(observer, node)
        assert not upgrade["spec"].get("snapshotBeforeUpgrade")
        assert all(not v.get("snapshot") for v in upgrade["status"]["volumes"].values())


async def test_on_a_ready_snapshot_precedes_the_relocation(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.start_upgrade(sandbox)
    await scenario.wait_manager(sandbox, observer, "completed", within=120)
    snapshots = observer.created("snapshots")
    assert len(snapshots) == len(scenario.NODES), [s["metadata"]["name"] for s in snapshots]
    for node in scenario.NODES:
        upgrade = final(observer, node)
        volume = f"vol-{node}"
        recorded = upgrade["status"]["volumes"][volume]["snapshot"]
        [mine] = [
            s for s in snapshots if s["metadata"]["labels"][FOR_UPGRADE_LABEL] == upgrade["metadata"]["name"]
        ]
        assert mine["metadata"]["name"] == recorded and mine["spec"]["volume"] == volume
        assert ready_before_relocation(observer, recorded, volume)


async def test_toggled_mid_flight_the_node_in_progress_keeps_its_setting(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver, nats_server: NatsServer
) -> None:
    await scenario.start_upgrade(sandbox)

    async def node_1_started() -> list[dict[str, Any]]:
        return await scenario.node_upgrades(sandbox, "node-1")

    await sandbox.wait_for(node_1_started, within=60, what="node-1's upgrade", invariant=observer.holds)
    await stack[-1].stop()
    replica = v2_upgrade(nats_server.url, "v2u-2", retry_backoff_s=1.0, snapshot_before_upgrade=True)
    stack.append(replica)
    await eventually(lambda: replica.ready, within=60, what="the new v2-upgrade replica to lead")
    await scenario.wait_manager(sandbox, observer, "completed", within=120)

    node_1 = final(observer, "node-1")
    assert not node_1["spec"].get("snapshotBeforeUpgrade")
    assert not node_1["status"]["volumes"]["vol-node-1"].get("snapshot")
    taken = {s["spec"]["volume"] for s in observer.created("snapshots")}
    assert taken == {"vol-node-2", "vol-node-3"}
    for node in ("node-2", "node-3"):
        upgrade = final(observer, node)
        assert upgrade["spec"]["snapshotBeforeUpgrade"] is True
        assert upgrade["status"]["volumes"][f"vol-{node}"]["snapshot"]
