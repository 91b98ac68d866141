"""V2U-13: scheduling guards during an upgrade (acceptance-scenarios.md §5.4).

`vol-1` (owned by node-1, two replicas: node-1 and node-2) and `vol-x` (owned by node-2, three
replicas, one per node). While node-1 upgrades (from `failing-replicas` until it reaches
`rebuilding-replica`, when its DataEngineUpgradeRequested flag is cleared):

* no new v2 replica is scheduled on node-1, although `vol-x` lost its replica there and node-1 is
  the only node it could go to (the scheduler filter as intended, not the prototype's inverted one);
* `vol-1` is not replenished, although node-3 could take a replica (the volume controller skips
  replenishment for the upgrading node's volumes).

Afterwards both are rebuilt and healthy. (The backup-ownership guard has no counterpart in the
sandbox: it models no backups.)
"""

from __future__ import annotations

import pytest

from corral_sandbox.seeds.model import Seed
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

GUARDED = ("failing-replicas", "switching-over", "upgrading-instance-manager", "switching-back")


class Guard:
    """Judges each replica write while node-1 upgrades, as the history grows (at every look)."""

    def __init__(self, observer: UpgradeObserver) -> None:
        self.observer = observer
        self.seen = 0
        self.node_1 = ""
        self.writes = 0

    def check(self) -> None:
        for write in self.observer.writes[self.seen :]:
            self.seen += 1
            if (
                write.plural == NODE_UPGRADES
                and write.new is not None
                and write.new["spec"]["nodeID"] == "node-1"
            ):
                self.node_1 = str((write.new.get("status") or {}).get("state", ""))
            if self.node_1 not in GUARDED or write.plural != "replicas" or write.new is None:
                continue
            self.writes += 1
            new_node = write.new["spec"].get("nodeID")
            old_node = (write.old or {}).get("spec", {}).get("nodeID")
            volume = write.new["spec"].get("volumeName")
            assert not (new_node == "node-1" and old_node != "node-1"), (
                f"replica {write.name} of {volume} scheduled on node-1 while it upgrades ({self.node_1})"
            )
            assert not (write.operation == "CREATE" and volume == "vol-1"), (
                f"vol-1 replenished ({write.name} on {new_node or 'no node'})"
                f" while node-1 upgrades ({self.node_1})"
            )


@pytest.fixture
def sandbox_seed() -> Seed:
    return scenario.v2_seed(
        [scenario.v2_volume("vol-1", replicas=2), scenario.v2_volume("vol-x", owner="node-2")]
    )


async def test_no_replica_lands_on_the_upgrading_node_and_its_volumes_are_not_replenished(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.settled(sandbox)
    assert sorted(r["spec"]["nodeID"] for r in await sandbox.replicas_of("vol-1")) == ["node-1", "node-2"]
    assert sorted(r["spec"]["nodeID"] for r in await sandbox.replicas_of("vol-x")) == list(scenario.NODES)
    await scenario.start_upgrade(sandbox)
    guarded = Guard(observer)
    await scenario.wait_manager(sandbox, observer, "completed", within=120, also=guarded.check)
    guarded.check()
    assert guarded.writes, "no replica write while node-1 upgraded: nothing was guarded"

    for volume, count in (("vol-1", 2), ("vol-x", 3)):
        obj = await sandbox.get("volumes", volume)
        assert obj["status"]["robustness"] == "healthy", (volume, obj["status"])
        running = [
            r for r in await sandbox.replicas_of(volume) if r["status"].get("currentState") == "running"
        ]
        assert len(running) == count
    assert "node-1" in {r["spec"]["nodeID"] for r in await sandbox.replicas_of("vol-x")}
