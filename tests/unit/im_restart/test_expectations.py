"""What im-restart does with its commands after sending them: results, refusals, another
replica's commands, and the optional restart limits."""

from __future__ import annotations

import msgspec

from corral_dangerzone.settings import DangerZoneSettings
from corral_decision import Timing
from corral_im_restart.core import DeciderConfig
from corral_im_restart.reasons import Reason
from corral_model import longhorn as lh
from corral_model.envelopes import Command, CommandResult, Outcome, Verb, first_attempt_id
from tests.unit.im_restart.cluster import (
    NS,
    Cluster,
    deletes,
    im_pod,
    instance_manager,
    kube_node,
    ready_node,
    setting,
)


def _cluster(config: DeciderConfig | None = None, ims: int = 1, nodes: int = 1) -> Cluster:
    """`ims` idle running IMs per node, all with synced pods, conditions already True."""
    cluster = Cluster(config)
    synced = (lh.Condition(type="SettingSynced", status="True"),)
    for n in range(1, nodes + 1):
        node, kube = ready_node(f"node-{n}"), kube_node(f"node-{n}")
        cluster.put(node, kube)
        for i in range(1, ims + 1):
            im = instance_manager(f"im-{n}-{i}", node.metadata.name, conditions=synced)
            cluster.put(im, im_pod(im, DangerZoneSettings.defaults(), node, kube))
    cluster.resync()
    assert cluster.decide() == []
    return cluster


def _deletes_of(commands: list[Command]) -> list[Command]:
    return [c for c in commands if c.verb is Verb.DELETE]


def _explain(cluster: Cluster, name: str) -> tuple[str, str]:
    [e] = cluster.decider.explain(f"InstanceManager/{NS}/{name}")
    return e.reason, e.detail


def test_a_refused_delete_is_not_resent_until_the_pod_is_fresher() -> None:
    cluster = _cluster()
    cluster.put(setting("priority-class", "p"))
    [delete] = _deletes_of(cluster.decide())
    cluster.result(delete, Outcome.PRECONDITION_FAILED)
    assert cluster.decide() == []
    assert _explain(cluster, "im-1-1")[0] == Reason.RETRY_BACKOFF
    pod = cluster.get("pod", "im-1-1")
    cluster.put(pod)  # the pod changed (a fresher resourceVersion): judged and sent again
    [again] = _deletes_of(cluster.decide())
    assert again.id != delete.id and again.target.uid == delete.target.uid


def test_a_refused_delete_is_resent_after_the_backoff() -> None:
    cluster = _cluster(DeciderConfig(timing=Timing(retry_backoff=30.0)))
    cluster.put(setting("priority-class", "p"))
    [delete] = _deletes_of(cluster.decide())
    cluster.result(delete, Outcome.PRECONDITION_FAILED)
    assert cluster.decider.next_due() == cluster.clock.now + 30.0
    cluster.clock.now += 30.0
    [again] = _deletes_of(cluster.decide())
    assert (first_attempt_id(again), again.attempt) == (delete.id, 1) and again.id != delete.id


def test_a_lost_delete_stops_counting_after_the_command_ttl() -> None:
    cluster = _cluster(DeciderConfig(timing=Timing(command_ttl=60.0)))
    cluster.put(setting("priority-class", "p"))
    [delete] = _deletes_of(cluster.decide())
    assert delete.id in [p.command_id for p in cluster.decider.expectations()]
    cluster.clock.now += 59.0
    assert _deletes_of(cluster.decide()) == []
    cluster.clock.now += 1.0
    [again] = _deletes_of(cluster.decide())
    assert (first_attempt_id(again), again.attempt) == (delete.id, 1)


def test_an_applied_delete_counts_until_the_view_shows_the_pod_go() -> None:
    cluster = _cluster()
    cluster.put(setting("priority-class", "p"))
    [delete] = _deletes_of(cluster.decide())
    cluster.result(delete)
    cluster.clock.now += 120.0  # past the command ttl: an applied one waits for the view
    assert _deletes_of(cluster.decide()) == []
    pod = cluster.get("pod", "im-1-1")
    terminating = msgspec.structs.replace(pod.metadata, deletion_timestamp="2026-11-25T00:00:00Z")
    cluster.put(msgspec.structs.replace(pod, metadata=terminating))
    assert _deletes_of(cluster.decide()) == []
    assert [p for p in cluster.decider.expectations() if p.target.kind == "Pod"] == []


def test_another_replicas_delete_is_adopted_only_while_it_can_apply() -> None:
    cluster = _cluster()
    cluster.put(setting("priority-class", "p"))
    [delete] = _deletes_of(cluster.decide())
    standby = cluster.replica()
    assert standby.adopt(delete, None) is True
    assert standby.adopt(delete, None) is False  # idempotent
    assert [p.command_id for p in standby.expectations()] == [delete.id]
    assert _deletes_of(list(standby.decide())) == []
    # A delete of an older version of the pod can no longer apply: not counted.
    cluster.put(cluster.get("pod", "im-1-1"))
    assert cluster.replica().adopt(delete, None) is False


def test_a_per_node_limit_rolls_restarts_one_replacement_at_a_time() -> None:
    cluster = _cluster(DeciderConfig(max_restarts_per_node=1), ims=2, nodes=2)
    cluster.put(setting("priority-class", "p"))
    first = _deletes_of(cluster.decide())
    assert sorted(c.target.name for c in first) == ["im-1-1", "im-2-1"]
    reason, detail = _explain(cluster, "im-1-2")
    assert reason == Reason.CONCURRENCY_LIMIT and "limit 1" in detail
    # im-1-1's pod goes and its replacement starts: the slot stays taken until it runs.
    settings = DangerZoneSettings.from_values({"priority-class": "p"})
    node, kube = cluster.get("node", "node-1"), cluster.get("kubenode", "node-1")
    im = cluster.get("instancemanager", "im-1-1")
    cluster.result(first[0])
    cluster.delete("pod", "im-1-1")
    cluster.put(msgspec.structs.replace(im, status=msgspec.structs.replace(im.status, current_state="error")))
    assert cluster.decide() == []
    cluster.put(im_pod(im, settings, node, kube, uid="pod-im-1-1-2", phase="Pending", ready=False))
    assert cluster.decide() == []
    assert _explain(cluster, "im-1-1")[0] == Reason.RESTARTING
    cluster.put(im_pod(im, settings, node, kube, uid="pod-im-1-1-2"))
    cluster.put(
        msgspec.structs.replace(im, status=msgspec.structs.replace(im.status, current_state="running"))
    )
    assert deletes(cluster.decide()) == ["im-1-2"]


def test_a_cluster_wide_limit_holds_across_nodes() -> None:
    cluster = _cluster(DeciderConfig(max_restarts=1), ims=1, nodes=3)
    cluster.put(setting("priority-class", "p"))
    assert deletes(cluster.decide()) == ["im-1-1"]
    assert cluster.decider.slots.waiting_count() == 2
    # A refusal frees the slot for the next IM in line.
    [pending] = [p for p in cluster.decider.expectations() if p.target.kind == "Pod"]
    cluster.decider.record_result(
        CommandResult(
            command_id=pending.command_id,
            service="im-restart",
            target=pending.target,
            outcome=Outcome.PRECONDITION_FAILED,
        )
    )
    assert deletes(cluster.decide()) == ["im-2-1"]


def test_failed_pods_are_never_held_back_by_a_limit() -> None:
    cluster = _cluster(DeciderConfig(max_restarts=1), ims=2)
    cluster.put(setting("priority-class", "p"))
    assert len(_deletes_of(cluster.decide())) == 1
    pod = cluster.get("pod", "im-1-2")
    cluster.put(msgspec.structs.replace(pod, status=lh.PodStatus(phase="Failed")))
    [delete] = _deletes_of(cluster.decide())
    assert delete.target.name == "im-1-2" and delete.reason.startswith("pod-failed")


def test_an_im_waiting_for_a_slot_that_turns_busy_no_longer_waits() -> None:
    cluster = _cluster(DeciderConfig(max_restarts_per_node=1), ims=2)
    cluster.put(setting("priority-class", "p"))
    [first] = _deletes_of(cluster.decide())
    assert first.target.name == "im-1-1"
    assert cluster.decider.slots.is_waiting((NS, "im-1-2"))
    im = cluster.get("instancemanager", "im-1-2")
    busy = lh.InstanceProcess(status=lh.InstanceProcessStatus(state="starting"))
    cluster.put(
        msgspec.structs.replace(im, status=msgspec.structs.replace(im.status, instance_replicas={"r": busy}))
    )
    cluster.decide()
    assert not cluster.decider.slots.is_waiting((NS, "im-1-2"))
    assert _explain(cluster, "im-1-2") == (Reason.BUSY, "r")
    cluster.result(first, Outcome.PRECONDITION_FAILED)  # the slot frees: nobody is due
    assert _deletes_of(cluster.decide()) == []
