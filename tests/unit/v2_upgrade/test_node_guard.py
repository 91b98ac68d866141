"""Every node upgrade step that acts on its node first looks at the node again: Ready, not being
deleted, v2 still enabled. Otherwise it holds, saying why, and resumes once the node is back
(issue 24, behaviour 2: the prototype checked readiness only in `initializing`, and went on to
delete a NotReady node's instance manager)."""

from __future__ import annotations

import msgspec
import pytest

from corral_model import longhorn as lh
from corral_model.envelopes import Command, CommandResult, Outcome, Verb
from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.view import DISABLE_V2_LABEL
from tests.unit.v2_upgrade.world import World, cluster, manager

S = UpgradeState

ACTING_STATES = (S.FAILING_REPLICAS, S.SWITCHING_OVER, S.UPGRADING_INSTANCE_MANAGER, S.SWITCHING_BACK)


def _into(world: World, node: str, state: str) -> None:
    world.step_until(node, state)


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


def test_a_delete_refused_for_a_notready_node_is_judged_again_when_the_node_is_back() -> None:
    """The explorer's v2-upgrade/node:upgrading-instance-manager/node-notready cell: the step
    decided the IM delete on a Ready node, the node went NotReady before the write, and the actuator
    refused it. The refusal holds the IM (its resourceVersion never moved), but only until the node
    changes: once it is Ready again the delete goes at the next pass, not after the retry backoff."""
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"})
    world.put(manager())
    world.start()
    _into(world, "node-1", S.SWITCHING_OVER)
    refused: list[Command] = []
    for _ in range(30):
        commands = world.decider.decide()
        deletes = [c for c in commands if c.target.kind == "InstanceManager" and c.verb is Verb.DELETE]
        for command in commands:
            if command not in deletes:
                world.apply(command)
        if deletes:
            refused.extend(deletes)
            break
        world.data_plane()
        world.clock.now += 1.0
    [delete] = refused
    healthy = _not_ready(world, "node-1")
    world.decider.record_result(
        CommandResult(
            command_id=delete.id,
            service="v2-upgrade",
            target=delete.target,
            outcome=Outcome.REJECTED_BY_POLICY,
            detail="never a node's instance manager deleted while the node is not Ready",
        )
    )
    world.clock.now += 1.0
    assert not [c for c in world.decider.decide() if c.target.kind == "InstanceManager"]
    world.put(healthy)
    world.clock.now += 1.0
    assert world.config.timing.retry_backoff > 2.0
    again = [c for c in world.decider.decide() if c.target.kind == "InstanceManager"]
    assert [c.target.name for c in again] == [delete.target.name], "re-judged once the node is back"
