"""SIM-K8S's pure rules, without an API server: placement (taints, tolerations, selectors, the
scheduler's message), Longhorn's Setting webhooks over a hand-built cluster, the default-setting
ConfigMap's reading, and rollouts run round after round on the in-memory World."""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.simulator import SimConfig
from corral_sandbox.simulator.default_settings import CONFIGMAP, KEY, customized
from corral_sandbox.simulator.placement import misfit, tolerates, unschedulable_message
from corral_sandbox.simulator.rollouts import DS_HASH, owner_of, template_hash
from corral_sandbox.simulator.setting_webhooks import FROM_LONGHORN, SettingWebhooks
from tests.unit.simulator.world import World

Obj = dict[str, Any]
NODE: Obj = {"metadata": {"name": "n1", "labels": {"disk": "ssd"}}, "spec": {}}


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoSchedule"}, True),
        ({"key": "a", "operator": "Exists"}, {"key": "a", "value": "b", "effect": "NoExecute"}, True),
        (
            {"key": "a", "operator": "Equal", "value": "b"},
            {"key": "a", "value": "b", "effect": "NoSchedule"},
            True,
        ),
        (
            {"key": "a", "operator": "Equal", "value": "c"},
            {"key": "a", "value": "b", "effect": "NoSchedule"},
            False,
        ),
        (
            {"key": "a", "value": "b", "effect": "NoExecute"},
            {"key": "a", "value": "b", "effect": "NoSchedule"},
            False,
        ),
        ({"key": "x", "operator": "Exists"}, {"key": "a", "effect": "NoSchedule"}, False),
    ],
)
def test_a_toleration_matches_a_taint_as_kubernetes_does(toleration: Obj, taint: Obj, expected: bool) -> None:
    assert tolerates([toleration], taint) is expected


def test_misfit_names_what_keeps_a_pod_off_a_node() -> None:
    assert misfit({}, NODE) is None
    assert (
        misfit({"nodeSelector": {"disk": "hdd"}}, NODE) == "node(s) didn't match Pod's node affinity/selector"
    )
    tainted = {**NODE, "spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}
    assert misfit({}, tainted) == "node(s) had untolerated taint {k: v}"
    assert misfit({}, tainted, effects=("NoExecute",)) is None, "a bound pod meets only NoExecute"
    assert misfit({"tolerations": [{"key": "k", "operator": "Exists"}]}, tainted) is None
    cordoned = {**NODE, "spec": {"unschedulable": True}}
    assert misfit({}, cordoned) == "node(s) were unschedulable"
    affinity = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
                    ]
                }
            }
        }
    }
    assert misfit(affinity, NODE) == "node(s) didn't match Pod's node affinity/selector"
    reasons = [
        "node(s) were unschedulable",
        "node(s) had untolerated taint {k: v}",
        "node(s) were unschedulable",
    ]
    assert unschedulable_message(reasons, 3) == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {k: v}, 2 node(s) were unschedulable."
    )


def test_the_default_setting_configmap_reads_as_strings() -> None:
    cm = {
        "metadata": {"name": CONFIGMAP},
        "data": {KEY: "taint-toleration: a:NoSchedule\nauto-salvage: true\nx: 3\n"},
    }
    assert customized(cm) == {"taint-toleration": "a:NoSchedule", "auto-salvage": "true", "x": "3"}
    assert customized({"data": {KEY: "[not: a map"}}) == {}
    assert customized({"data": {KEY: "- a list"}}) == {}
    assert customized({}) == {}


class Cluster:
    """A ClusterLookup over plain lists, as the webhooks read the API server."""

    def __init__(self, objects: dict[tuple[str, str], list[Obj]]) -> None:
        self.objects = objects

    def list(self, group: str, plural: str, namespace: str | None = None) -> list[Obj]:
        return self.objects.get((group, plural), [])

    def get(self, group: str, plural: str, namespace: str, name: str) -> Obj | None:
        return next((o for o in self.list(group, plural) if o["metadata"]["name"] == name), None)


def setting(name: str, value: str, annotations: dict[str, str] | None = None) -> Obj:
    return {"metadata": {"name": name, "annotations": annotations or {}}, "value": value}


def webhooks(**objects: list[Obj]) -> SettingWebhooks:
    lookup = {
        ("longhorn.io", "settings"): objects.get("settings", []),
        ("longhorn.io", "instancemanagers"): objects.get("instancemanagers", []),
        ("longhorn.io", "nodes"): objects.get("nodes", []),
        ("", "nodes"): objects.get("kube_nodes", []),
        ("scheduling.k8s.io", "priorityclasses"): objects.get("classes", []),
    }
    return SettingWebhooks(Cluster(lookup), "longhorn-system")


def test_the_mutating_webhook_normalises_danger_zone_values() -> None:
    hooks = webhooks()
    new = setting("guaranteed-instance-manager-cpu", "20")
    assert hooks.mutate("UPDATE", new, new) == {**new, "value": '{"v1":"20","v2":"20"}'}
    assert hooks.mutate("UPDATE", None, setting("data-engine-cpu-mask", "1-3,5"))["value"] == '{"v2":"0x2e"}'  # type: ignore[index]
    assert hooks.mutate("UPDATE", None, setting("taint-toleration", "a:NoSchedule")) is None
    assert hooks.mutate("UPDATE", None, setting("auto-salvage", "true")) is None, "not a danger-zone setting"


def test_the_validating_webhook_refuses_as_longhorn_does() -> None:
    im = {
        "metadata": {"name": "im-1"},
        "spec": {"type": "aio", "dataEngine": "v1"},
        "status": {"instanceEngines": {"vol-1-e-0": {}}},
    }
    hooks = webhooks(instancemanagers=[im], classes=[{"metadata": {"name": "high"}}])
    bad = hooks.validate("UPDATE", None, setting("taint-toleration", "k:Bad"))
    assert bad is not None and bad.endswith("invalid effect: Bad")
    missing = hooks.validate("UPDATE", None, setting("priority-class", "low"))
    assert missing is not None and "failed to get priority class low" in missing
    assert hooks.validate("UPDATE", None, setting("priority-class", "high")) is None
    toggle = hooks.validate("UPDATE", None, setting("v1-data-engine", "false"))
    assert toggle is not None and "when there are attached v1 volumes" in toggle
    assert hooks.validate("UPDATE", None, setting("storage-over-provisioning-percentage", "x")) is None
    deleted = hooks.validate("DELETE", setting("taint-toleration", ""), None)
    assert deleted == "setting taint-toleration can be modified but not deleted"
    assert hooks.validate("DELETE", setting("some-obsolete-setting", ""), None) is None


def test_a_read_only_setting_changes_only_with_the_managers_annotation() -> None:
    hooks = webhooks()
    old = setting("default-engine-image", "a")
    assert hooks.validate("UPDATE", old, setting("default-engine-image", "b")) == (
        "setting default-engine-image is read-only"
    )
    assert hooks.validate("UPDATE", old, setting("default-engine-image", "b", {FROM_LONGHORN: ""})) is None
    marked = setting("default-engine-image", "a", {FROM_LONGHORN: ""})
    assert hooks.validate("UPDATE", marked, setting("default-engine-image", "b")) is None
    assert hooks.validate("UPDATE", old, setting("default-engine-image", "a")) is None, "no value change"


def test_v2_needs_hugepages_on_every_available_node() -> None:
    node = {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    kube = {"metadata": {"name": "n1"}, "status": {"capacity": {}}}
    message = webhooks(nodes=[node], kube_nodes=[kube]).validate(
        "UPDATE", None, setting("v2-data-engine", "true")
    )
    assert message is not None and "failed to get hugepages-2Mi capacity for node n1" in message
    kube["status"] = {"capacity": {"hugepages-2Mi": "1Gi"}}
    message = webhooks(nodes=[node], kube_nodes=[kube]).validate(
        "UPDATE", None, setting("v2-data-engine", "true")
    )
    assert message is not None and "not enough hugepages-2Mi capacity for node n1" in message
    kube["status"] = {"capacity": {"hugepages-2Mi": "2Gi"}}
    assert (
        webhooks(nodes=[node], kube_nodes=[kube]).validate("UPDATE", None, setting("v2-data-engine", "true"))
        is None
    )


def daemon_pods(world: World, name: str) -> list[Obj]:
    return [p for p in world.view.all("pod") if owner_of(p) == ("daemonset", name)]


def test_a_template_change_rolls_every_daemon_pod_and_the_status_says_so() -> None:
    world = World(config=SimConfig(pod_startup_seconds=0.0))
    world.settle()
    plugin = world.get("daemonset", "longhorn-csi-plugin")
    before = {p["metadata"]["uid"] for p in daemon_pods(world, "longhorn-csi-plugin")}
    assert len(before) == 3 and plugin["status"]["updatedNumberScheduled"] == 3
    template = plugin["spec"]["template"]
    world.patch(
        "daemonset", "longhorn-csi-plugin", {"spec": {"template": {"spec": {"priorityClassName": "x"}}}}
    )
    world.settle()
    pods = daemon_pods(world, "longhorn-csi-plugin")
    assert pods == [], "no pod while the template names a missing PriorityClass"
    world.put("priorityclass", {"metadata": {"name": "x"}, "value": 5})
    world.settle()
    pods = daemon_pods(world, "longhorn-csi-plugin")
    digest = template_hash(world.get("daemonset", "longhorn-csi-plugin")["spec"]["template"])
    assert digest != template_hash(template)
    assert len(pods) == 3 and not before & {p["metadata"]["uid"] for p in pods}
    assert {p["metadata"]["labels"][DS_HASH] for p in pods} == {digest}
    assert {p["status"]["phase"] for p in pods} == {"Running"}
    status = world.get("daemonset", "longhorn-csi-plugin")["status"]
    assert (status["desiredNumberScheduled"], status["updatedNumberScheduled"], status["numberReady"]) == (
        3,
        3,
        3,
    )


def test_kube_workloads_can_be_turned_off() -> None:
    world = World(config=SimConfig(kube_workloads=False))
    world.settle()
    assert world.view.all("daemonset") == [] and world.view.all("volumeattachment") == []
