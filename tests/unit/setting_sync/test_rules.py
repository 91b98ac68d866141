"""setting-sync's routing per §3.3 group, one rule per test: what lags, when it may change, the
commands and their preconditions, and what `status.applied` and `explain` say."""

from __future__ import annotations

import json

import msgspec
import pytest

from corral_model import longhorn as lh
from corral_model.envelopes import Verb
from corral_setting_sync.reasons import Reason
from tests.unit.setting_sync.cluster import (
    Cluster,
    applied_writes,
    by_kind,
    component_pod,
    setting,
    volume,
    workload,
)

TOLERATION = "key1=value1:NoSchedule"


def managed_cluster(*settings: lh.Setting, volumes: tuple[lh.Volume, ...] = ()) -> Cluster:
    """Components created under the defaults, then `settings` stored (as an operator's change)."""
    cluster = Cluster()
    cluster.put(
        workload(lh.DaemonSet, "longhorn-csi-plugin"),
        workload(lh.Deployment, "csi-attacher"),
        workload(lh.Deployment, "longhorn-ui"),  # unmanaged: never touched
        workload(lh.DaemonSet, "longhorn-manager"),  # unmanaged
        component_pod("instance-manager-n1", "instance-manager"),
        component_pod("share-manager-pvc-x", "share-manager"),
        component_pod("backing-image-manager-n1", "backing-image-manager"),
        component_pod("some-workload-pod", "other"),  # not a component
        *volumes,
        *settings,
    )
    cluster.resync()
    return cluster


def reason(cluster: Cluster, name: str) -> tuple[str, str]:
    [e] = cluster.decider.explain(f"Setting/longhorn-system/{name}")
    return e.reason, e.detail


def test_group_a_waits_for_every_volume_then_applies_everything_in_one_decision() -> None:
    cluster = managed_cluster(
        setting("taint-toleration", TOLERATION, applied=True),
        volumes=(volume("pvc-a", "attached"), volume("pvc-b", "attaching"), volume("pvc-c", "detached")),
    )
    first = cluster.decide()
    assert by_kind(first) == [("patch-status", "Setting", "taint-toleration")]
    assert applied_writes(first) == {"taint-toleration": False}
    assert reason(cluster, "taint-toleration") == ("attached-volumes", "2 attached volumes: pvc-a, pvc-b")
    cluster.carry_out(first)

    cluster.put(volume("pvc-a", "detached"))
    assert cluster.decide() == []  # pvc-b still blocks
    cluster.put(volume("pvc-b", "detached"))
    wave = cluster.decide()
    assert by_kind(wave) == [
        ("delete", "Pod", "backing-image-manager-n1"),
        ("delete", "Pod", "instance-manager-n1"),
        ("delete", "Pod", "share-manager-pvc-x"),
        ("patch", "DaemonSet", "longhorn-csi-plugin"),
        ("patch", "Deployment", "csi-attacher"),
    ]
    # Sent, not yet visible: applied stays false until the view shows every change.
    assert reason(cluster, "taint-toleration")[0] == "applying"
    cluster.carry_out(wave)
    done = cluster.decide()
    assert applied_writes(done) == {"taint-toleration": True}
    assert reason(cluster, "taint-toleration") == ("applied", "")


def test_the_precondition_is_checked_only_when_something_lags() -> None:
    values = {"taint-toleration": TOLERATION}
    cluster = Cluster()
    cluster.put(
        component_pod("instance-manager-n1", values=values),
        workload(lh.Deployment, "csi-attacher", values),
        volume("pvc-a", "attached"),
        setting("taint-toleration", TOLERATION, applied=False),
    )
    cluster.resync()
    assert applied_writes(cluster.decide()) == {"taint-toleration": True}


def test_a_template_keeps_foreign_tolerations_and_records_the_last_applied() -> None:
    cluster = managed_cluster(setting("taint-toleration", TOLERATION))
    ds = cluster.get("daemonset", "longhorn-csi-plugin")
    foreign = lh.Toleration(key="foreign", operator="Exists")
    template = ds.spec.template
    cluster.put(
        lh.DaemonSet(
            metadata=ds.metadata,
            spec=lh.WorkloadSpec(
                template=lh.PodTemplate(
                    metadata=template.metadata,
                    spec=lh.PodSpec(tolerations=(foreign,), containers=template.spec.containers),
                )
            ),
        )
    )
    [patch] = [c for c in cluster.decide() if c.target.name == "longhorn-csi-plugin"]
    changes = {c.path: c.value for c in patch.changes}
    assert changes["/spec/template/spec/tolerations"] == [
        {"key": "foreign", "operator": "Exists"},
        {"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"},
    ]
    annotation = changes["/spec/template/metadata/annotations/longhorn.io~1last-applied-tolerations"]
    assert json.loads(annotation) == [
        {"key": "key1", "operator": "Equal", "value": "value1", "effect": "NoSchedule"}
    ]
    assert [(p.path, p.value) for p in patch.preconditions] == [
        (
            "/metadata/resourceVersion",
            cluster.get("daemonset", "longhorn-csi-plugin").metadata.resource_version,
        )
    ]


def test_priority_class_with_nothing_attached_applies_at_once_and_spares_unmanaged_workloads() -> None:
    cluster = managed_cluster(setting("priority-class", "system-cluster-critical"))
    sent = cluster.settle()
    touched = {(c.target.kind, c.target.name) for c in sent if c.verb is not Verb.PATCH_STATUS}
    assert touched == {
        ("DaemonSet", "longhorn-csi-plugin"),
        ("Deployment", "csi-attacher"),
        ("Pod", "instance-manager-n1"),
        ("Pod", "share-manager-pvc-x"),
        ("Pod", "backing-image-manager-n1"),
    }
    assert cluster.get("setting", "priority-class").status.applied is True
    assert cluster.get("deployment", "csi-attacher").spec.template.spec.priority_class_name == (
        "system-cluster-critical"
    )


def test_pod_delete_names_the_exact_pod_judged() -> None:
    cluster = managed_cluster(setting("priority-class", "high"))
    pod = cluster.get("pod", "instance-manager-n1")
    [delete] = [c for c in cluster.decide() if c.target.name == "instance-manager-n1"]
    assert delete.target.uid == pod.metadata.uid
    assert [(p.path, p.value) for p in delete.preconditions] == [
        ("/metadata/uid", pod.metadata.uid),
        ("/metadata/resourceVersion", pod.metadata.resource_version),
        ("/metadata/labels/longhorn.io~1component", "instance-manager"),
    ]


def test_a_terminating_pod_is_not_deleted_again_and_keeps_applied_false() -> None:
    cluster = managed_cluster(setting("system-managed-components-node-selector", "kubernetes.io/hostname:n1"))
    sent = cluster.settle()
    assert len([c for c in sent if c.target.name == "instance-manager-n1"]) == 1
    # A new pod that came back with the old selector and is now terminating: left to finish.
    stale = component_pod("instance-manager-n1")
    cluster.put(
        lh.Pod(
            metadata=lh.ObjectMeta(
                name=stale.metadata.name,
                namespace=stale.metadata.namespace,
                uid=stale.metadata.uid,
                labels=stale.metadata.labels,
                annotations=stale.metadata.annotations,
                deletion_timestamp="2026-11-25T00:00:00Z",
            ),
            spec=stale.spec,
        )
    )
    after = cluster.decide()
    assert applied_writes(after) == {"system-managed-components-node-selector": False}
    assert [c for c in after if c.verb is Verb.DELETE] == []
    cluster.carry_out(after)
    cluster.delete("pod", "instance-manager-n1")
    assert applied_writes(cluster.decide()) == {"system-managed-components-node-selector": True}


def test_storage_network_deletes_only_im_and_backing_image_manager_pods() -> None:
    cluster = managed_cluster(setting("storage-network", "kube-system/storage"))
    sent = cluster.decide()
    assert by_kind(sent) == [
        ("delete", "Pod", "backing-image-manager-n1"),
        ("delete", "Pod", "instance-manager-n1"),
    ]


def test_endpoint_network_is_blocked_only_by_attached_non_migratable_rwx_volumes() -> None:
    cluster = managed_cluster(
        setting("endpoint-network-for-rwx-volume", "kube-system/endpoint"),
        setting("storage-network", "kube-system/storage"),
        volumes=(
            volume("rwo", "attached"),
            volume("rwx-migratable", "attached", access_mode="rwx", migratable=True),
            volume("rwx", "attached", access_mode="rwx"),
        ),
    )
    assert [c for c in cluster.decide() if c.verb is not Verb.PATCH_STATUS] == []
    assert reason(cluster, "endpoint-network-for-rwx-volume") == (
        "rwx-volumes-attached",
        "1 attached RWX volume: rwx",
    )
    cluster.put(volume("rwx", "detached"))
    sent = cluster.decide()
    # Only the csi-plugin template: the IM/BIM pods' stale lhnet1 annotation is storage-network's,
    # which still waits for the RWO volume (Longhorn's shared routine would delete them: README).
    assert by_kind([c for c in sent if c.verb is not Verb.PATCH_STATUS]) == [
        ("patch", "DaemonSet", "longhorn-csi-plugin")
    ]
    [patch] = [c for c in sent if c.verb is Verb.PATCH]
    assert {c.path: c.value for c in patch.changes} == {
        "/spec/template/metadata/annotations/k8s.v1.cni.cncf.io~1networks": (
            '[{"namespace": "kube-system", "name": "endpoint", "interface": "lhnet2"}]'
        )
    }


def test_csi_resource_limits_apply_with_volumes_attached() -> None:
    limits = '{"csi-attacher": {"requests": {"cpu": "100m"}}}'
    cluster = managed_cluster(
        setting("system-managed-csi-components-resource-limits", limits),
        volumes=(volume("pvc-a", "attached"),),
    )
    sent = cluster.decide()
    patches = [c for c in sent if c.verb is Verb.PATCH]
    assert {c.target.name for c in patches} == {"csi-attacher"}  # the csi-plugin's containers: already empty
    assert patches[0].changes[0].path == "/spec/template/spec/containers/0/resources"
    assert patches[0].changes[0].value == {"requests": {"cpu": "100m"}}
    cluster.carry_out(sent)
    assert applied_writes(cluster.decide()) == {"system-managed-csi-components-resource-limits": True}
    # Equal as quantities: 0.1 CPU is 100m, nothing more to do.
    cluster.put(setting("system-managed-csi-components-resource-limits", limits.replace("100m", "0.1")))
    assert [c for c in cluster.decide() if c.verb is Verb.PATCH] == []


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("taint-toleration", "key1:Bogus", "invalid effect: Bogus"),
        (
            "concurrent-replica-rebuild-per-node-limit",
            "-1",
            "value -1 for data engine all should be larger than or equal to 0",
        ),
        (
            "storage-network",
            "a/b/c",
            "cni network must be in <NAMESPACE>/<NETWORK-ATTACHMENT-DEFINITION> format",
        ),
    ],
)
def test_an_invalid_value_is_never_applied(name: str, value: str, message: str) -> None:
    cluster = managed_cluster(setting(name, value, applied=True))
    sent = cluster.decide()
    assert by_kind(sent) == [("patch-status", "Setting", name)]
    assert applied_writes(sent) == {name: False}
    why, detail = reason(cluster, name)
    assert why == "invalid-value"
    assert detail.startswith(f"value {value} of settings {name} is invalid") and message in detail


def test_settings_that_are_not_applied_here() -> None:
    cluster = managed_cluster(
        setting("storage-over-provisioning-percentage", "100"),  # not danger-zone
        setting("concurrent-replica-rebuild-per-node-limit", "3"),  # consumed by the schedulers
    )
    sent = cluster.decide()
    assert applied_writes(sent) == {
        "storage-over-provisioning-percentage": True,
        "concurrent-replica-rebuild-per-node-limit": True,
    }
    assert reason(cluster, "storage-over-provisioning-percentage")[0] == Reason.NOT_DANGER_ZONE
    assert reason(cluster, "concurrent-replica-rebuild-per-node-limit")[0] == Reason.CONSUMED_ELSEWHERE


def test_status_write_is_preconditioned_on_the_value_judged() -> None:
    cluster = managed_cluster(setting("priority-class", "high", applied=True))
    [status] = [c for c in cluster.decide() if c.verb is Verb.PATCH_STATUS]
    assert [(p.path, p.value) for p in status.preconditions] == [
        ("/value", "high"),
        ("/metadata/resourceVersion", cluster.get("setting", "priority-class").metadata.resource_version),
    ]


def test_nothing_is_decided_before_every_kind_is_listed() -> None:
    cluster = Cluster()
    cluster.put(setting("priority-class", "high"), component_pod("instance-manager-n1"))
    assert cluster.decide() == []
    assert reason(cluster, "priority-class") == ("view-incomplete", "")


def test_pending_gauge_counts_each_danger_zone_setting_until_applied() -> None:
    cluster = managed_cluster(
        setting("taint-toleration", TOLERATION),
        setting("storage-over-provisioning-percentage", "100"),
        volumes=(volume("pvc-a", "attached"),),
    )
    cluster.carry_out(cluster.decide())
    assert cluster.decider.pending_by_setting() == {"taint-toleration": 1}
    cluster.put(volume("pvc-a", "detached"))
    cluster.settle()
    assert cluster.decider.pending_by_setting() == {"taint-toleration": 0}


def test_a_pod_that_changes_component_is_judged_for_its_new_settings() -> None:
    cluster = managed_cluster(setting("storage-network", "kube-system/storage"))
    cluster.carry_out(cluster.decide())
    assert cluster.decider.pending_by_setting() == {"storage-network": 0}
    # A share-manager pod (storage-network is not its setting) relabelled as a backing-image manager.
    pod = cluster.get("pod", "share-manager-pvc-x")
    labels = {"longhorn.io/component": "backing-image-manager"}
    cluster.put(msgspec.structs.replace(pod, metadata=msgspec.structs.replace(pod.metadata, labels=labels)))
    assert [c.target.name for c in cluster.decide() if c.verb is Verb.DELETE] == ["share-manager-pvc-x"]


def test_a_value_set_back_and_forth_is_a_new_status_write_not_a_duplicate() -> None:
    """A, B, A within LH_COMMANDS' dedup window: the second `applied=false` for A is another
    decision (another id), or JetStream would drop it and the status would keep saying true."""
    cluster = managed_cluster(
        setting("priority-class", "a", applied=True), volumes=(volume("pvc-a", "attached"),)
    )
    first = [c for c in cluster.decide() if c.verb is Verb.PATCH_STATUS]
    cluster.carry_out(first)
    cluster.put(setting("priority-class", "b", applied=False))
    cluster.carry_out(cluster.decide())
    cluster.put(setting("priority-class", "a", applied=True))  # someone wrote true meanwhile
    again = [c for c in cluster.decide() if c.verb is Verb.PATCH_STATUS]
    assert applied_writes(first) == applied_writes(again) == {"priority-class": False}
    assert first[0].id != again[0].id
