"""§3.3 group D and the engine-image probes (group C): the data-engine toggles delete a disabled
engine's IM CRs, the guaranteed IM CPU restarts IM pods whose request lags, both only while no
instance manager of that engine runs engine instances; the probe settings patch the engine-image
DaemonSets' liveness probe at once."""

from __future__ import annotations

from typing import Any

import msgspec

from corral_dangerzone.settings import DangerZoneSettings
from corral_model import longhorn as lh
from corral_model.envelopes import Verb
from tests.unit.im_restart.cluster import im_pod, instance_manager, kube_node, ready_node
from tests.unit.setting_sync.cluster import NS, Cluster, applied_writes, by_kind, setting, volume, workload

DEFAULTS = DangerZoneSettings.defaults()


def reason(cluster: Cluster, name: str) -> tuple[str, str]:
    [e] = cluster.decider.explain(f"Setting/{NS}/{name}")
    return e.reason, e.detail


def engine_cluster(*objs: Any, busy: dict[str, str] | None = None) -> Cluster:
    """Two nodes (4 CPUs each), a v1 and a v2 IM on each with pods built under the defaults; the
    IMs named in `busy` hold an engine instance."""
    cluster = Cluster()
    for node in ("node-1", "node-2"):
        lh_node, kube = ready_node(node), kube_node(node)
        cluster.put(lh_node, kube)
        for engine in ("v1", "v2"):
            name = f"im-{engine}-{node}"
            engines = {"e-1": busy[name]} if busy and name in busy else None
            im = instance_manager(name, node, engine=engine, engines=engines)
            cluster.put(im, im_pod(im, DEFAULTS, lh_node, kube))
    cluster.put(*objs)
    cluster.resync()
    return cluster


def test_disabling_an_idle_engine_deletes_its_instance_managers_then_is_applied() -> None:
    cluster = engine_cluster(setting("v2-data-engine", "true", applied=True))
    assert [c for c in cluster.decide() if c.verb is Verb.DELETE] == []
    cluster.put(setting("v2-data-engine", "false", applied=True))
    sent = cluster.decide()
    deletes = [c for c in sent if c.verb is Verb.DELETE]
    assert by_kind(deletes) == [
        ("delete", "InstanceManager", "im-v2-node-1"),
        ("delete", "InstanceManager", "im-v2-node-2"),
    ]
    guard = {p.path: p.value for p in deletes[0].preconditions}
    assert guard["/spec/dataEngine"] == "v2" and guard["/metadata/uid"] == "uid-im-v2-node-1"
    assert "/metadata/resourceVersion" in guard
    assert reason(cluster, "v2-data-engine")[0] == "applying"
    cluster.carry_out(deletes)
    assert applied_writes(cluster.decide()) == {}  # it was true all along: nothing to write
    assert reason(cluster, "v2-data-engine") == ("applied", "")


def test_a_disabled_engine_with_engine_instances_waits_and_says_which_instance_managers() -> None:
    cluster = engine_cluster(
        setting("v1-data-engine", "false", applied=True),
        setting("v2-data-engine", "true", applied=True),
        busy={"im-v1-node-1": "running"},
    )
    sent = cluster.decide()
    assert [c for c in sent if c.verb is Verb.DELETE] == []
    assert applied_writes(sent) == {"v1-data-engine": False}
    assert reason(cluster, "v1-data-engine") == (
        "engine-instances",
        "v1 1 instance manager with engine instances: im-v1-node-1",
    )
    cluster.carry_out(sent)
    # The engine stops: the IM's own event lifts the precondition, both IMs go in one decision.
    cluster.put(instance_manager("im-v1-node-1", "node-1"))
    deletes = [c for c in cluster.decide() if c.verb is Verb.DELETE]
    assert by_kind(deletes) == [
        ("delete", "InstanceManager", "im-v1-node-1"),
        ("delete", "InstanceManager", "im-v1-node-2"),
    ]
    cluster.carry_out(deletes)
    assert applied_writes(cluster.decide()) == {"v1-data-engine": True}


def test_guaranteed_cpu_restarts_lagging_pods_only_once_the_engine_is_idle_v1_first() -> None:
    cluster = engine_cluster(
        setting("v2-data-engine", "true", applied=True), busy={"im-v1-node-2": "running"}
    )
    assert [c for c in cluster.decide() if c.verb is Verb.DELETE] == []
    cluster.put(setting("guaranteed-instance-manager-cpu", '{"v1":"20","v2":"20"}', applied=True))
    sent = cluster.decide()
    # v1 runs an engine instance: nothing is restarted, not even the idle v2 pods (v1 stops v2).
    assert [c for c in sent if c.verb is Verb.DELETE] == []
    assert applied_writes(sent) == {"guaranteed-instance-manager-cpu": False}
    assert reason(cluster, "guaranteed-instance-manager-cpu")[0] == "engine-instances"
    cluster.carry_out(sent)

    cluster.put(instance_manager("im-v1-node-2", "node-2"))
    deletes = [c for c in cluster.decide() if c.verb is Verb.DELETE]
    assert sorted(c.target.name for c in deletes) == [
        "im-v1-node-1",
        "im-v1-node-2",
        "im-v2-node-1",
        "im-v2-node-2",
    ]
    assert {c.target.kind for c in deletes} == {"Pod"}
    # Longhorn recreates them with 20 % of 4 CPUs: 800m.
    new = DangerZoneSettings.from_values(cluster.values)
    for command in deletes:
        im = cluster.get("instancemanager", command.target.name)
        cluster.delete("pod", command.target.name)
        node = im.spec.node_id
        cluster.put(im_pod(im, new, ready_node(node), kube_node(node), uid=f"new-{command.target.name}"))
    assert cluster.get("pod", "im-v1-node-1").spec.containers[0].resources.requests["cpu"] == "800m"
    assert reason(cluster, "guaranteed-instance-manager-cpu") == ("applied", "")


def test_a_node_override_makes_only_that_nodes_pods_lag() -> None:
    cluster = engine_cluster(setting("v2-data-engine", "true", applied=True))
    cluster.decide()
    cluster.put(ready_node("node-1", cpu_request=150))
    deletes = [c for c in cluster.decide() if c.verb is Verb.DELETE]
    assert sorted(c.target.name for c in deletes) == ["im-v1-node-1", "im-v2-node-1"]


def test_an_invalid_guaranteed_cpu_is_never_applied() -> None:
    cluster = engine_cluster(
        setting("v2-data-engine", "true", applied=True),
        setting("guaranteed-instance-manager-cpu", "41", applied=True),
    )
    sent = cluster.decide()
    assert [c for c in sent if c.verb is Verb.DELETE] == []
    assert applied_writes(sent) == {"guaranteed-instance-manager-cpu": False}
    why, detail = reason(cluster, "guaranteed-instance-manager-cpu")
    assert why == "invalid-value" and "should be less than or equal to 40" in detail


def engine_image_daemonset(name: str, period: int = 5, timeout: int = 4, threshold: int = 3) -> lh.DaemonSet:
    ds: lh.DaemonSet = workload(lh.DaemonSet, name)
    probe = lh.Probe(period_seconds=period, timeout_seconds=timeout, failure_threshold=threshold)
    container = lh.Container(name="engine-image", liveness_probe=probe)
    template = msgspec.structs.replace(
        ds.spec.template, spec=msgspec.structs.replace(ds.spec.template.spec, containers=(container,))
    )
    meta = msgspec.structs.replace(ds.metadata, labels={"longhorn.io/component": "engine-image"})
    return msgspec.structs.replace(
        ds, metadata=meta, spec=msgspec.structs.replace(ds.spec, template=template)
    )


def test_engine_image_probe_settings_patch_every_engine_image_daemonset_with_volumes_attached() -> None:
    cluster = engine_cluster(
        setting("v2-data-engine", "true", applied=True),
        engine_image_daemonset("engine-image-ei-aaaa"),
        engine_image_daemonset("engine-image-ei-bbbb"),
        volume("pvc-a", "attached"),
    )
    assert [c for c in cluster.decide() if c.verb is Verb.PATCH] == []  # the defaults: nothing lags
    cluster.put(
        setting("engine-image-pod-liveness-probe-period", "30", applied=True),
        setting("engine-image-pod-liveness-probe-timeout", "15", applied=True),
    )
    patches = [c for c in cluster.decide() if c.verb is Verb.PATCH]
    assert sorted(c.target.name for c in patches) == ["engine-image-ei-aaaa", "engine-image-ei-bbbb"]
    assert {c.path: c.value for c in patches[0].changes} == {
        "/spec/template/spec/containers/0/livenessProbe/periodSeconds": 30,
        "/spec/template/spec/containers/0/livenessProbe/timeoutSeconds": 15,
    }
    cluster.carry_out(patches)
    cluster.decide()
    assert reason(cluster, "engine-image-pod-liveness-probe-period") == ("applied", "")
    assert cluster.get("daemonset", "engine-image-ei-aaaa").spec.template.spec.containers[
        0
    ].liveness_probe == (lh.Probe(period_seconds=30, timeout_seconds=15, failure_threshold=3))


def test_a_daemonset_named_like_an_engine_image_but_not_labelled_is_not_touched() -> None:
    impostor = engine_image_daemonset("engine-image-ei-cccc")
    impostor = msgspec.structs.replace(
        impostor, metadata=msgspec.structs.replace(impostor.metadata, labels={})
    )
    cluster = engine_cluster(impostor, setting("engine-image-pod-liveness-probe-period", "30"))
    assert [c for c in cluster.decide() if c.verb is Verb.PATCH] == []
