"""The decider killed in every state of both machines (the crash test, in process): when a state
is first seen, the commands of that pass are lost with the decider, and a fresh one built from the
objects alone takes over. Each run completes, one node at a time, with no duplicate node upgrade,
snapshot or instance-manager deletion."""

from __future__ import annotations

import msgspec
import pytest

from corral_decision import Timing
from corral_model.envelopes import Verb
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.states import MANAGER_STEPS, NODE_STEPS
from tests.unit.v2_upgrade.world import World, cluster, manager, volume

CASES = [("manager", str(s)) for s in MANAGER_STEPS] + [("node", str(s)) for s in NODE_STEPS]


def states(world: World, machine: str) -> set[str]:
    if machine == "manager":
        return {str(m.status.state) for m in world.all("dataengineupgrademanager")}
    return {str(u.status.state) for u in world.all("nodedataengineupgrade")}


@pytest.mark.parametrize(("machine", "state"), CASES, ids=[f"{m}-{s or 'undefined'}" for m, s in CASES])
def test_killed_in_any_state_it_resumes_from_the_objects(machine: str, state: str) -> None:
    world = cluster(
        volumes={"vol-a": "node-1", "vol-b": "node-2"},
        config=DeciderConfig(
            node_timeout=0, snapshot_before_upgrade=True, timing=Timing(command_ttl=5, applied_ttl=5)
        ),
    )
    world.put(*volume("vol-off", "node-1", attached=False), manager())
    world.start()
    crashed = False
    for _ in range(300):
        world.clock.now += 1.0
        for snap in world.all("snapshot"):
            if not snap.status.ready_to_use:
                world.put(
                    msgspec.structs.replace(
                        snap, status=msgspec.structs.replace(snap.status, ready_to_use=True)
                    )
                )
        commands = world.decider.decide()
        if not crashed and state in states(world, machine):
            crashed = True
            world.restart()  # this pass's commands die with the decider
        else:
            for command in commands:
                world.apply(command)
        world.data_plane()
        busy = [u for u in world.all("nodedataengineupgrade") if u.status.state not in ("completed", "error")]
        assert len(busy) <= 1
        if world.get("dataengineupgrademanager", "upgrade").status.state == "completed":
            break
    assert crashed, f"{machine} never reached {state!r}"
    final = world.get("dataengineupgrademanager", "upgrade").status
    assert final.state == "completed" and final.message == "3 of 3 nodes upgraded"
    for kind in ("NodeDataEngineUpgrade", "Snapshot"):
        creates = [c.target.name for c in world.applied if c.verb is Verb.CREATE and c.target.kind == kind]
        assert len(creates) == len(set(creates)), creates
    deletes = [
        c.target.name for c in world.applied if c.verb is Verb.DELETE and c.target.kind == "InstanceManager"
    ]
    assert len(deletes) == len(set(deletes)) == 3
    assert len(world.all("snapshot")) == 2  # one per attached volume, each taken once
