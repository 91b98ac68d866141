"""The §4.3 `handlePod` decision, rule by rule, on the decider (longhorn-behaviour.md §4.3-4.5)."""

from __future__ import annotations

import msgspec
import pytest

from corral_dangerzone.pod_spec import expected_instance_manager_pod
from corral_dangerzone.settings import DangerZoneSettings
from corral_decision.decider import InvalidEvent
from corral_im_restart.reasons import Reason
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent, Verb
from tests.unit.im_restart.cluster import (
    NS,
    Cluster,
    condition_patches,
    deletes,
    im_pod,
    instance_manager,
    kube_node,
    one_node_cluster,
    ready_node,
    setting,
)


def reason(cluster: Cluster, name: str = "im-1") -> str:
    [explanation] = cluster.decider.explain(f"InstanceManager/{NS}/{name}")
    return explanation.reason


def test_an_idle_synced_im_is_left_alone_and_its_condition_set_true_once() -> None:
    cluster = one_node_cluster()
    first = cluster.decide()
    assert deletes(first) == [] and condition_patches(first) == ["im-1"]
    assert first[0].changes[0].value[0]["status"] == "True"
    assert reason(cluster) == Reason.SETTINGS_SYNCED
    # The IM now carries the condition: nothing more to say, whatever else changes on it.
    im = cluster.get("instancemanager", "im-1")
    cluster.put(
        msgspec.structs.replace(
            im,
            status=msgspec.structs.replace(
                im.status, conditions=(lh.Condition(type="SettingSynced", status="True"),)
            ),
        )
    )
    assert cluster.decide() == []


def test_an_idle_im_with_an_unsynced_setting_gets_one_preconditioned_delete() -> None:
    cluster = one_node_cluster()
    cluster.decide()
    cluster.put(setting("priority-class", "high-priority"))
    commands = cluster.decide()
    [delete] = [c for c in commands if c.verb is Verb.DELETE]
    pod = cluster.get("pod", "im-1")
    assert delete.target.kind == "Pod" and delete.target.uid == pod.metadata.uid
    assert {(p.path, p.value) for p in delete.preconditions} == {
        ("/metadata/uid", pod.metadata.uid),
        ("/metadata/resourceVersion", pod.metadata.resource_version),
        ("/metadata/labels/longhorn.io~1component", "instance-manager"),
    }
    assert delete.reason.startswith("settings-unsynced: priority-class")
    assert reason(cluster) == Reason.COMMAND_PENDING
    # Nothing changes in view: the same pod is never deleted twice.
    cluster.put(setting("taint-toleration", "k=v:NoSchedule"))
    assert deletes(cluster.decide()) == []


@pytest.mark.parametrize("state", ["running", "starting"])
def test_a_busy_im_is_never_deleted_but_its_condition_names_the_settings(state: str) -> None:
    cluster = one_node_cluster(engines={"e-1": state}, replicas={"r-1": "stopped"})
    cluster.put(setting("priority-class", "high-priority"), setting("storage-network", "ns/net"))
    commands = cluster.decide()
    assert deletes(commands) == []
    [patch] = commands
    [condition] = patch.changes[0].value
    assert condition["status"] == "False" and condition["reason"] == "SettingNotSynced"
    assert condition["message"] == "Settings [priority-class storage-network] are not synced"
    [explanation] = cluster.decider.explain()
    assert (explanation.reason, explanation.detail) == (Reason.BUSY, "e-1")


def test_a_burst_of_settings_while_busy_leads_to_exactly_one_delete_once_idle() -> None:
    cluster = one_node_cluster(replicas={"r-1": "running"})
    cluster.decide()
    for name, value in [
        ("priority-class", "a"),
        ("priority-class", "b"),
        ("storage-network", "ns/n"),
        ("taint-toleration", "k=v:NoSchedule"),
    ]:
        cluster.put(setting(name, value))
        assert deletes(cluster.decide()) == []
    im = cluster.get("instancemanager", "im-1")
    idle = instance_manager("im-1", "node-1", replicas={"r-1": "stopped"}, conditions=im.status.conditions)
    cluster.put(idle)
    [delete] = [c for c in cluster.decide() if c.verb is Verb.DELETE]
    assert "priority-class" in delete.reason and "taint-toleration" in delete.reason
    cluster.result(delete)
    cluster.put(idle)  # more IM events: still the one delete
    assert deletes(cluster.decide()) == []
    # The pod goes; Longhorn's controller builds the new one from the settings now in force.
    cluster.delete("pod", "im-1")
    assert deletes(cluster.decide()) == []
    settings = DangerZoneSettings.from_values(
        {"priority-class": "b", "storage-network": "ns/n", "taint-toleration": "k=v:NoSchedule"}
    )
    node, kube = cluster.get("node", "node-1"), cluster.get("kubenode", "node-1")
    cluster.put(im_pod(idle, settings, node, kube, uid="pod-im-1-2"))
    assert deletes(cluster.decide()) == []
    assert reason(cluster) == Reason.SETTINGS_SYNCED


def test_a_failed_pod_is_always_deleted_even_with_synced_settings() -> None:
    cluster = one_node_cluster(state="error")
    pod = cluster.get("pod", "im-1")
    cluster.put(msgspec.structs.replace(pod, status=lh.PodStatus(phase="Failed")))
    commands = cluster.decide()
    assert deletes(commands) == ["im-1"] and commands[0].reason.startswith("pod-failed")
    assert condition_patches(commands) == []  # not running: the condition is left as it is


@pytest.mark.parametrize("im_state", ["error", "stopped"])
def test_a_status_lagging_a_fresh_pod_never_gets_that_pod_deleted(im_state: str) -> None:
    cluster = one_node_cluster(state=im_state)
    assert deletes(cluster.decide()) == []
    assert reason(cluster) == Reason.NOT_RUNNING


@pytest.mark.parametrize(
    ("phase", "ready", "deleting", "expected"),
    [
        ("Pending", False, False, Reason.NOT_RUNNING),
        ("", False, False, Reason.NOT_RUNNING),
        ("Running", False, False, Reason.NOT_RUNNING),
        ("Running", True, True, Reason.POD_TERMINATING),
    ],
)
def test_a_pod_not_running_or_terminating_is_left_alone(
    phase: str, ready: bool, deleting: bool, expected: str
) -> None:
    cluster = one_node_cluster()
    cluster.put(setting("priority-class", "high-priority"))
    pod = cluster.get("pod", "im-1")
    meta = msgspec.structs.replace(
        pod.metadata, deletion_timestamp="2026-01-01T00:00:00Z" if deleting else None
    )
    status = lh.PodStatus(phase=phase, container_statuses=(lh.ContainerStatus(ready=ready),))
    cluster.put(msgspec.structs.replace(pod, metadata=meta, status=status))
    assert deletes(cluster.decide()) == []
    assert reason(cluster) == expected


@pytest.mark.parametrize("state", ["starting", "unknown"])
def test_an_im_starting_or_on_a_down_node_is_left_alone(state: str) -> None:
    cluster = one_node_cluster(state=state)
    cluster.put(setting("priority-class", "high-priority"))
    assert cluster.decide() == []
    assert reason(cluster) == Reason.NOT_RUNNING


def test_a_missing_pod_is_not_ours_to_create() -> None:
    cluster = one_node_cluster()
    cluster.delete("pod", "im-1")
    assert deletes(cluster.decide()) == []
    assert reason(cluster) == Reason.POD_MISSING


def test_a_disabled_data_engine_restarts_its_idle_ims() -> None:
    cluster = one_node_cluster()
    cluster.put(setting("v1-data-engine", "false"))
    assert deletes(cluster.decide()) == ["im-1"]


def _v2_cluster(kube_hugepages: str) -> Cluster:
    cluster = Cluster()
    settings = DangerZoneSettings.from_values({"v2-data-engine": "true"})
    node, kube = ready_node("node-1"), kube_node("node-1", hugepages=kube_hugepages)
    im = instance_manager("im-1", "node-1", engine="v2")
    recorded = expected_instance_manager_pod(im, settings, node, kube).v2_status
    assert recorded is not None
    v2 = lh.DataEngineV2Status(**msgspec.structs.asdict(recorded))
    status = msgspec.structs.replace(im.status, data_engine_status=lh.DataEngineStatus(v2=v2))
    im = msgspec.structs.replace(im, status=status)
    cluster.put(setting("v2-data-engine", "true"), node, kube, im, im_pod(im, settings, node, kube))
    cluster.resync()
    return cluster


def test_a_hugepage_change_the_node_cannot_take_blocks_the_restart_and_says_why() -> None:
    cluster = _v2_cluster(kube_hugepages="2Gi")
    assert deletes(cluster.decide()) == []
    assert reason(cluster) == Reason.SETTINGS_SYNCED
    cluster.put(setting("data-engine-memory-size", '{"v2":"4096"}'))
    commands = cluster.decide()
    assert deletes(commands) == []
    assert reason(cluster) == Reason.HUGEPAGE_CAPACITY


def test_a_hugepage_change_the_node_can_take_restarts_the_idle_im() -> None:
    cluster = _v2_cluster(kube_hugepages="8Gi")
    cluster.decide()
    cluster.put(setting("data-engine-memory-size", '{"v2":"4096"}'))
    commands = cluster.decide()
    assert deletes(commands) == ["im-1"]
    assert "data-engine-hugepage-enabled, data-engine-memory-size" in commands[-1].reason


def test_a_v2_cpu_mask_not_applied_restarts_the_idle_im() -> None:
    cluster = _v2_cluster(kube_hugepages="8Gi")
    cluster.decide()
    cluster.put(setting("data-engine-cpu-mask", '{"v2":"0x7"}'))
    commands = cluster.decide()
    assert deletes(commands) == ["im-1"]
    assert "cpu mask not applied" in next(c for c in commands if c.verb is Verb.DELETE).reason


def test_invalid_settings_decide_no_restart_but_failed_pods_still_go() -> None:
    cluster = one_node_cluster()
    cluster.decide()
    cluster.put(setting("guaranteed-instance-manager-cpu", "lots"))
    assert cluster.decide() == []
    assert reason(cluster) == Reason.SETTINGS_INVALID
    pod = cluster.get("pod", "im-1")
    cluster.put(msgspec.structs.replace(pod, status=lh.PodStatus(phase="Failed")))
    assert deletes(cluster.decide()) == ["im-1"]


def test_a_node_cpu_override_touches_only_the_ims_on_that_node() -> None:
    cluster = one_node_cluster()
    other = instance_manager("im-2", "node-2")
    node2, kube2 = ready_node("node-2"), kube_node("node-2")
    cluster.put(node2, kube2, other, im_pod(other, DangerZoneSettings.defaults(), node2, kube2))
    cluster.decide()
    cluster.put(ready_node("node-2", cpu_request=1500))
    assert cluster.decider._dirty == {(NS, "im-2")}
    assert deletes(cluster.decide()) == ["im-2"]


def test_an_existing_condition_is_patched_in_place_on_the_status_judged() -> None:
    synced = lh.Condition(type="SettingSynced", status="True", last_transition_time="2026-01-01T00:00:00Z")
    ready = lh.Condition(type="PodReady", status="True")
    cluster = one_node_cluster(engines={"e-1": "running"}, conditions=(ready, synced))
    assert cluster.decide() == []
    cluster.put(setting("priority-class", "p"))
    [patch] = cluster.decide()
    im = cluster.get("instancemanager", "im-1")
    assert {c.path: c.value for c in patch.changes} == {
        "/status/conditions/1/status": "False",
        "/status/conditions/1/reason": "SettingNotSynced",
        "/status/conditions/1/message": "Settings [priority-class] are not synced",
        "/status/conditions/1/lastTransitionTime": "1970-01-12T13:46:40Z",
    }
    assert {(p.path, p.value) for p in patch.preconditions} == {
        ("/metadata/resourceVersion", im.metadata.resource_version),
        ("/status/conditions/1/type", "SettingSynced"),
    }


def test_events_it_cannot_use_are_refused_and_change_nothing() -> None:
    cluster = one_node_cluster()
    with pytest.raises(InvalidEvent):
        cluster.decider.apply(ObjectEvent(type=EventType.MODIFIED, kind="volume", namespace=NS, name="v"))
    with pytest.raises(InvalidEvent):
        cluster.decider.apply(
            ObjectEvent(type=EventType.MODIFIED, kind="pod", namespace=NS, name="p", object=None)
        )


def test_nothing_is_decided_before_every_kind_is_listed() -> None:
    cluster = Cluster()
    im = instance_manager("im-1", "node-1")
    cluster.put(ready_node("node-1"), kube_node("node-1"), im, setting("priority-class", "x"))
    cluster.put(
        im_pod(
            im,
            DangerZoneSettings.defaults(),
            cluster.get("node", "node-1"),
            cluster.get("kubenode", "node-1"),
        )
    )
    cluster.resync(["instancemanager", "pod", "setting", "node"])
    assert cluster.decide() == []
    assert reason(cluster) == Reason.VIEW_INCOMPLETE
    cluster.resync(["kubenode"])
    assert deletes(cluster.decide()) == ["im-1"]


def test_an_event_that_moves_only_resource_versions_re_judges_nothing() -> None:
    cluster = one_node_cluster(replicas={"r-1": "running"})
    [patch] = cluster.decide()  # SettingSynced=True, out on the IM
    pod = cluster.get("pod", "im-1")
    restarted = lh.PodStatus(
        phase="Running",
        pod_ip="10.0.0.9",
        container_statuses=(lh.ContainerStatus(ready=True, restart_count=3),),
    )
    cluster.put(msgspec.structs.replace(pod, status=restarted))
    assert cluster.decider._dirty == set()  # nothing out on the pod: nothing to look at
    # A fresher IM settles the command out on it, so that IM is looked at again.
    cluster.put(cluster.get("instancemanager", "im-1"))
    assert cluster.decider._dirty == {(NS, "im-1")}
    [again] = cluster.decide()  # the IM did not take the patch: the condition is sent anew
    assert again.verb is Verb.PATCH_STATUS and again.preconditions != patch.preconditions
