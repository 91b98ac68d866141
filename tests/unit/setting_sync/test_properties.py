"""Property: whatever the order of setting changes, volume attach/detach and pod updates,
* no pod is deleted and no template patched while some volume is not detached (group A);
* `applied=true` is never written while a component still carries the old value;
* once every volume is detached, one decision issues every change (nothing lags after it);
* in the end every setting is applied.
Lagging is judged here independently of the decider, from what a component created under the
current values carries (cluster.carried)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from corral_dangerzone.network import CNI_NETWORKS_ANNOTATION
from corral_dangerzone.tolerations import LAST_APPLIED_TOLERATIONS_ANNOTATION
from corral_model import longhorn as lh
from corral_model.envelopes import Command, Verb
from tests.unit.setting_sync.cluster import Cluster, carried, component_pod, setting, volume, workload

VALUES = {
    "taint-toleration": ["", "k1:NoSchedule", "k1=v1:NoExecute;k2:NoSchedule"],
    "priority-class": ["", "high", "low"],
    "system-managed-components-node-selector": ["", "zone:a", "zone:b;disk:ssd"],
    "storage-network": ["", "ns/net1", "ns/net2"],
}
VOLUMES = ["pvc-a", "pvc-b", "pvc-c"]
PODS = [
    ("instance-manager-n1", "instance-manager"),
    ("instance-manager-n2", "instance-manager"),
    ("share-manager-pvc-a", "share-manager"),
    ("backing-image-manager-n1", "backing-image-manager"),
]

set_op = st.sampled_from(sorted(VALUES)).flatmap(
    lambda name: st.tuples(st.just("set"), st.just(name), st.sampled_from(VALUES[name]))
)
volume_op = st.tuples(
    st.just("volume"), st.sampled_from(VOLUMES), st.sampled_from(["attached", "detached", "attaching"])
)
touch_op = st.tuples(st.just("touch"), st.sampled_from([name for name, _ in PODS]), st.just(""))
decide_op = st.tuples(st.just("decide"), st.just(""), st.just(""))
operations = st.lists(st.one_of(set_op, volume_op, touch_op, decide_op), max_size=40)


def lags(token: str, obj: Any, name: str, values: dict[str, str]) -> bool:
    if token == "pod":
        spec, annotations = obj.spec, obj.metadata.annotations
    else:
        spec, annotations = obj.spec.template.spec, obj.spec.template.metadata.annotations
    want_spec, want_annotations = carried(values)
    if name == "taint-toleration":
        return bool(
            annotations.get(LAST_APPLIED_TOLERATIONS_ANNOTATION)
            != want_annotations[LAST_APPLIED_TOLERATIONS_ANNOTATION]
        )
    if name == "priority-class":
        return bool(spec.priority_class_name != want_spec.priority_class_name)
    if name == "system-managed-components-node-selector":
        return (spec.node_selector or {}) != (want_spec.node_selector or {})
    if token == "pod" and obj.metadata.labels["longhorn.io/component"] != "share-manager":
        return bool(
            annotations.get(CNI_NETWORKS_ANNOTATION, "") != want_annotations.get(CNI_NETWORKS_ANNOTATION, "")
        )
    return False  # storage-network: IM and backing-image-manager pods only


def lagging(cluster: Cluster, name: str) -> list[str]:
    return [
        obj.metadata.name
        for (token, _), obj in cluster.objects.items()
        if token in ("pod", "daemonset", "deployment") and lags(token, obj, name, cluster.values)
    ]


def attached(cluster: Cluster) -> list[str]:
    return [n for (t, n), v in cluster.objects.items() if t == "volume" and v.status.state != "detached"]


def decide_and_check(cluster: Cluster) -> list[Command]:
    blocked = attached(cluster)
    commands = cluster.decide()
    changes = [c for c in commands if c.verb is not Verb.PATCH_STATUS]
    if blocked:
        assert changes == [], f"{changes} while {blocked} attached"
    written = {c.target.name: c.changes[0].value for c in commands if c.verb is Verb.PATCH_STATUS}
    for name in VALUES:
        if written.get(name, cluster.get("setting", name).status.applied):
            assert not lagging(cluster, name), f"applied=true for {name} while components lag"
    cluster.carry_out(commands)
    if not blocked:
        for name in VALUES:
            assert lagging(cluster, name) == [], f"{name} still lags after the decision"
    return commands


@settings(max_examples=150, deadline=None)
@given(operations)
def test_no_change_while_attached_and_applied_only_when_true(ops: list[tuple[str, str, str]]) -> None:
    cluster = Cluster()
    cluster.put(
        workload(lh.DaemonSet, "longhorn-csi-plugin"),
        workload(lh.Deployment, "csi-attacher"),
        *(component_pod(name, component) for name, component in PODS),
        *(volume(v, "attached") for v in VOLUMES[:1]),
        *(volume(v) for v in VOLUMES[1:]),
        *(setting(name, "", applied=True) for name in VALUES),
    )
    cluster.resync()
    for op, a, b in ops:
        if op == "set":
            current = cluster.get("setting", a)
            cluster.put(setting(a, b, applied=current.status.applied))
        elif op == "volume":
            cluster.put(volume(a, b))
        elif op == "touch":
            pod = cluster.get("pod", a)
            cluster.put(lh.Pod(metadata=pod.metadata, spec=pod.spec, status=lh.PodStatus(phase="Pending")))
        else:
            decide_and_check(cluster)
    for v in VOLUMES:
        cluster.put(volume(v, "detached"))
    decide_and_check(cluster)  # everything issued in this one decision
    for _ in range(3):
        decide_and_check(cluster)
    assert {name: cluster.get("setting", name).status.applied for name in VALUES} == dict.fromkeys(
        VALUES, True
    )
