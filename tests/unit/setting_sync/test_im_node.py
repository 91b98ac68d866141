"""An instance manager's pod is deleted only while its Longhorn node is Ready, and only on that
node as read (im_node.py; the explorer's setting-sync/applying/node-notready cell)."""

from __future__ import annotations

from corral_model import longhorn as lh
from corral_model.envelopes import Command, Verb
from tests.unit.setting_sync.cluster import NS, Cluster, component_pod, setting


def node(ready: bool) -> lh.Node:
    condition = lh.Condition(type="Ready", status="True" if ready else "False")
    return lh.Node(
        metadata=lh.ObjectMeta(name="node-1", namespace=NS, uid="node-1-uid"),
        status=lh.NodeStatus(conditions=(condition,)),
    )


def deletes(commands: list[Command]) -> list[Command]:
    return [c for c in commands if c.verb is Verb.DELETE and c.target.kind == "Pod"]


def test_an_im_pod_waits_while_its_node_is_not_ready_and_goes_on_its_node_as_read() -> None:
    cluster = Cluster()
    cluster.put(node(ready=False), component_pod("instance-manager-n1"), setting("priority-class", "high"))
    cluster.resync()
    assert deletes(cluster.decide()) == [], "never while the node is not Ready"
    cluster.put(node(ready=True))
    [delete] = deletes(cluster.decide())
    [related] = delete.related
    ready = cluster.get("node", "node-1")
    assert related.target.name == "node-1" and related.target.uid == "node-1-uid"
    assert [(h.path, h.value) for h in related.holds] == [
        ("/metadata/resourceVersion", ready.metadata.resource_version)
    ]


def test_while_its_node_is_not_ready_the_setting_says_it_waits_for_that_node() -> None:
    """The wait has a reason of its own, said as every other wait is: `explain`, the pending
    gauge and a Warning Event on the Setting."""
    cluster = Cluster()
    cluster.put(node(ready=False), component_pod("instance-manager-n1"), setting("priority-class", "high"))
    cluster.resync()
    cluster.decide()
    [said] = cluster.decider.explain("Setting/longhorn-system/priority-class")
    assert (said.reason, said.detail) == ("node-not-ready", "waiting for node node-1 to be Ready")
    assert cluster.decider.pending_by_setting()["priority-class"] == 1
    [event] = cluster.events
    assert event.body is not None
    said_by_event = (event.body["reason"], event.body["message"])
    assert said_by_event == ("NodeNotReady", "waiting for node node-1 to be Ready")
    cluster.put(node(ready=True))
    assert deletes(cluster.decide())
    [said] = cluster.decider.explain("Setting/longhorn-system/priority-class")
    assert said.reason == "applying"
