"""V2U-07: LEP "Fail 1" and "Fail 2", a single-replica volume (acceptance-scenarios.md §5.4).

`vol-single` (one replica, on node-1) and `vol-ok` (three) attached on node-1. node-1's upgrade
does not get past the precheck: it stays `initializing` (Design A retries and never fails) with a
message naming `vol-single`; no replica is failed, no IM deleted, both volumes stay attached and
healthy. Raising `vol-single` to two replicas lets the upgrade proceed and complete.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.seeds.model import Seed
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

BLOCKER = "volume vol-single has only 1 replica, which is not supported for live upgrade"


@pytest.fixture
def sandbox_seed() -> Seed:
    return scenario.v2_seed([scenario.v2_volume("vol-single", replicas=1), scenario.v2_volume("vol-ok")])


async def test_a_single_replica_volume_holds_its_node_until_it_has_two(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.settled(sandbox)
    [single] = await sandbox.replicas_of("vol-single")
    assert single["spec"]["nodeID"] == "node-1"
    since = observer.mark()
    await scenario.start_upgrade(sandbox)

    async def blocked() -> dict[str, Any] | None:
        upgrades = await scenario.node_upgrades(sandbox, "node-1")
        if upgrades and (upgrades[0].get("status") or {}).get("message") == BLOCKER:
            return upgrades[0]
        return None

    upgrade = await sandbox.wait_for(blocked, within=60, what="node-1 blocked", invariant=observer.holds)
    assert scenario.state(upgrade) == "initializing"

    async def still_blocked() -> bool:
        await observer.holds()
        [now] = await scenario.node_upgrades(sandbox, "node-1")
        volumes = [await sandbox.get("volumes", v) for v in ("vol-single", "vol-ok")]
        return (
            scenario.state(now) == "initializing"
            and now["status"].get("message") == BLOCKER
            and all(
                v["status"]["state"] == "attached" and v["status"]["robustness"] == "healthy" for v in volumes
            )
        )

    await sandbox.stays(still_blocked, 2.0, what="node-1 held in initializing", interval=0.1)
    stopped = [
        v for v in observer.versions("replicas", since=since) if v["spec"].get("desireState") != "running"
    ]
    assert stopped == [], "a replica was failed while the upgrade was blocked"
    assert observer.deleted("replicas", since=since) == []
    assert [
        im for im in observer.deleted("instancemanagers", since=since) if im["spec"]["dataEngine"] == "v2"
    ] == []

    await sandbox.patch("volumes", "vol-single", {"spec": {"numberOfReplicas": 2}})
    manager = await scenario.wait_manager(sandbox, observer, "completed", within=120)
    assert manager["status"]["upgradeNodes"]["node-1"]["state"] == "completed"
    for volume in ("vol-single", "vol-ok"):
        obj = await sandbox.get("volumes", volume)
        assert obj["status"]["state"] == "attached" and obj["spec"]["image"] == scenario.NEW_IM
