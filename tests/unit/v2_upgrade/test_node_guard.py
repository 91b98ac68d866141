"""Every node upgrade step that acts on its node first looks at the node again: Ready, not being
deleted, v2 still enabled. Otherwise it holds, saying why, and resumes once the node is back
(issue 24, behaviour 2: the prototype checked readiness only in `initializing`, and went on to
delete a NotReady node's instance manager)."""

from __future__ import annotations

import msgspec
import pytest

from corral_model import longhorn as lh
from corral_model.envelopes import Verb
from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.view import DISABLE_V2_LABEL
from tests.unit.v2_upgrade.world import World, cluster, manager

S = UpgradeState

ACTING_STATES = (S.FAILING_REPLICAS, S.SWITCHING_OVER, S.UPGRADING_INSTANCE_MANAGER, S.SWITCHING_BACK)


def _into(world: World, node: str, state: str) -> None:
    for _ in range(60):
        found = world.node_upgrades(node)
        if found and found[-1].status.state == state:
            return
        world.step(tick=1.0)
    raise AssertionError(f"{node} never reached {state}")


def _not_ready(world: World, node: str) -> lh.Node:
    ready = world.get("node", node)
    world.put(
        msgspec.structs.replace(
            ready, status=lh.NodeStatus(conditions=(lh.Condition(type="Ready", status="False"),))
        )
    )
    return ready  # type: ignore[no-any-return]


def _being_deleted(world: World, node: str) -> lh.Node:
    whole = world.get("node", node)
    meta = msgspec.structs.replace(whole.metadata, deletion_timestamp="2027-01-15T08:00:00Z")
    world.put(msgspec.structs.replace(whole, metadata=meta))
    return whole  # type: ignore[no-any-return]


def _v2_disabled(world: World, node: str) -> lh.KubeNode:
    kube = world.get("kubenode", node)
    labels = {**kube.metadata.labels, DISABLE_V2_LABEL: "true"}
    world.put(msgspec.structs.replace(kube, metadata=msgspec.structs.replace(kube.metadata, labels=labels)))
    return kube  # type: ignore[no-any-return]


FAULTS = {
    "not-ready": (_not_ready, "node node-1 is not ready"),
    "being-deleted": (_being_deleted, "node node-1 is being deleted"),
    "v2-disabled": (_v2_disabled, "V2 data engine is disabled for node node-1"),
}


@pytest.mark.parametrize("state", ACTING_STATES)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_step_holds_while_its_node_is_unfit_and_resumes_after(state: str, fault: str) -> None:
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"})
    world.put(manager())
    world.start()
    _into(world, "node-1", state)
    make_unfit, reason = FAULTS[fault]
    healthy = make_unfit(world, "node-1")
    acted = len(world.applied)
    for _ in range(5):
        world.step(tick=1.0)
    [upgrade] = world.node_upgrades("node-1")
    assert upgrade.status.state == state, "no step is taken on an unfit node"
    assert upgrade.status.message == reason
    on_node = [
        c
        for c in world.applied[acted:]
        if c.target.kind in ("Replica", "InstanceManager", "Volume") or c.verb is Verb.DELETE
    ]
    assert on_node == [], "nothing is written for the node while it is unfit"
    world.put(healthy)
    assert world.run() == "completed"
    assert world.node_upgrades("node-1")[-1].status.state == S.COMPLETED
