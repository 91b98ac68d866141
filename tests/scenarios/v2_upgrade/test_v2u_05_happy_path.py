"""V2U-05: the happy path, LEP "Success 1" (acceptance-scenarios.md §5.4).

Every engine on node-1; three v2 volumes with a replica on every node, serving I/O. The upgrade of
node-1 passes through every state in order; meanwhile node-1 is flagged upgrade-requested and the
flag is cleared after; its v2 replicas are failed, then deleted, then rebuilt on it; every target
moves to node-2 or node-3 and back; the old IM is deleted and one on the new image runs. Volumes
are never detached and their I/O gaps stay within the switch-over budget (the stack's observer, at
every write and every look). At the end every v2 IM runs the new image and every volume is healthy.

The sandbox runs no workload pods: "pods not restarted" is the ledger's detach count staying 0 (a
detach is what restarts a workload pod, SIM-CRASH).
"""

from __future__ import annotations

from typing import Any

from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES
from tests.scenarios.v2_upgrade.io_ledger import io_budget, ledger
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

VOLUMES = ("vol-1", "vol-2", "vol-3")
FLAG = "DataEngineUpgradeRequested"


def condition(node: dict[str, Any], kind: str) -> str:
    for held in (node.get("status") or {}).get("conditions") or []:
        if held.get("type") == kind:
            return str(held.get("status", ""))
    return ""


def compressed(values: list[Any]) -> list[str]:
    out: list[str] = []
    for value in values:
        text = str(value or "")
        if not out or out[-1] != text:
            out.append(text)
    return out


async def test_node_1_upgrades_while_its_volumes_keep_serving(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    replicas_before = {
        r["metadata"]["name"]: r
        for r in await sandbox.list("replicas")
        if r["spec"].get("dataEngine") == "v2" and r["spec"]["nodeID"] == "node-1"
    }
    assert sorted(r["spec"]["volumeName"] for r in replicas_before.values()) == list(VOLUMES)
    [old_im] = await scenario.v2_instance_managers(sandbox, "node-1")
    await scenario.start_upgrade(sandbox)

    await scenario.wait_manager(sandbox, observer, "completed", within=120)

    # node-1's upgrade went through every state, in order
    [first, *_] = observer.created(NODE_UPGRADES)
    assert first["spec"]["nodeID"] == "node-1"
    states = [s for s in observer.states(NODE_UPGRADES, first["metadata"]["name"]) if s]
    assert states == list(scenario.NODE_STEPS)

    # node-1 flagged while it upgraded, the flag cleared after
    flags = compressed([condition(n, FLAG) for n in observer.versions("nodes", "node-1")])
    assert "True" in flags and flags[-1] == "False", flags

    # its v2 replicas failed, then deleted; rebuilt on node-1
    deleted = {r["metadata"]["name"]: r for r in observer.deleted("replicas")}
    for name in replicas_before:
        stopped = [v["spec"].get("desireState") for v in observer.versions("replicas", name)]
        assert "stopped" in stopped, f"replica {name} was never stopped: {stopped}"
        assert name in deleted, f"replica {name} was not deleted"
    rebuilt = [
        r
        for r in await sandbox.list("replicas")
        if r["spec"].get("dataEngine") == "v2" and r["spec"]["nodeID"] == "node-1"
    ]
    assert sorted(r["spec"]["volumeName"] for r in rebuilt) == list(VOLUMES)
    assert all(r["metadata"]["name"] not in replicas_before for r in rebuilt)
    assert all((r.get("status") or {}).get("currentState") == "running" for r in rebuilt)

    # every target moved away from node-1 and back, then was cleared
    for volume in VOLUMES:
        targets = compressed(observer.values("volumes", volume, "spec", "targetNodeIDForLiveUpgrade"))
        assert len(targets) == 4 and targets[0] == "" and targets[2:] == ["node-1", ""], (volume, targets)
        assert targets[1] in ("node-2", "node-3"), (volume, targets)
        current = compressed(
            observer.values("volumes", volume, "status", "currentTargetNodeIDForLiveUpgrade")
        )
        assert targets[1] in current and "node-1" in current and current[-1] == "", (volume, current)

    # the old IM deleted, one on the new image running; every v2 IM on the new image at the end
    assert old_im["metadata"]["name"] in {
        im["metadata"]["name"] for im in observer.deleted("instancemanagers")
    }
    for node in scenario.NODES:
        ims = await scenario.v2_instance_managers(sandbox, node)
        assert [im["spec"]["image"] for im in ims] == [scenario.NEW_IM], (node, ims)
        assert ims[0]["status"]["currentState"] == "running"

    # every volume attached, healthy, on the new image
    for volume in VOLUMES:
        obj = await sandbox.get("volumes", volume)
        assert obj["status"]["state"] == "attached" and obj["status"]["robustness"] == "healthy"
        assert obj["spec"]["image"] == obj["status"]["currentImage"] == scenario.NEW_IM
        assert not obj["spec"].get("targetNodeIDForLiveUpgrade")

    # the I/O ledger measured both switch-overs of each volume: short suspends, never a detach (the
    # sandbox runs no workload pods; a detach is what would restart one)
    budget = io_budget(sandbox)
    for volume, entry in ledger(sandbox).items():
        if volume not in VOLUMES:
            continue
        assert entry["detaches"] == 0 and entry["crashDetaches"] == 0, (volume, entry)
        suspends = [g for g in entry["gaps"] if "suspended" in g["reasons"]]
        assert len(suspends) >= 2, (volume, entry["gaps"])
        assert all(0 < g["seconds"] < budget for g in entry["gaps"]), (volume, entry["gaps"], budget)
    await observer.holds()
