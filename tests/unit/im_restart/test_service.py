"""im-restart as the kit and the actuator see it: found through its entry point, subscribed to
every kind it reads (kube nodes under the watcher's cluster-scope token), restarts counted by
reason, gauges per node and setting, and commands the actuator's policy lets through."""

from __future__ import annotations

from pathlib import Path

import msgspec

from corral_actuator.policy import Policy
from corral_decision import decision_service
from corral_im_restart.commands import command_mode
from corral_im_restart.service import DEFINITION, ImRestartConfig, gauges
from corral_model.envelopes import FieldValue, Target, Verb, new_command
from tests.unit.im_restart.cluster import one_node_cluster, setting

POLICY = Policy.load(Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml")


def test_the_kit_finds_im_restart_through_its_entry_point() -> None:
    assert decision_service("im-restart") is DEFINITION
    assert DEFINITION.command_token("Pod") == "pod"
    assert DEFINITION.command_token("InstanceManager") == "instancemanager"


def test_it_reads_kube_nodes_under_the_cluster_scope_token() -> None:
    assert DEFINITION.object_filters("longhorn-system") == [
        "lh.obj.instancemanager.longhorn-system.>",
        "lh.obj.kubenode._.>",
        "lh.obj.node.longhorn-system.>",
        "lh.obj.pod.longhorn-system.>",
        "lh.obj.setting.longhorn-system.>",
    ]


def test_limits_are_off_by_default_as_in_longhorn() -> None:
    config = ImRestartConfig(service="im-restart").decider_config()
    assert (config.max_restarts, config.max_restarts_per_node) == (0, 0)


def test_restarts_are_counted_by_reason_and_gauged_per_node_and_setting() -> None:
    cluster = one_node_cluster(engines={"e-1": "running"})
    cluster.put(setting("priority-class", "p"), setting("storage-network", "ns/n"))
    [patch] = cluster.decide()
    assert command_mode(patch) == "condition"
    families = {f.name: f for f in gauges(cluster.decider)}
    samples = {
        (s.labels["node"], s.labels["setting"]): s.value for s in families["corral_im_unsynced"].samples
    }
    assert samples == {("node-1", "priority-class"): 1, ("node-1", "storage-network"): 1}
    im = cluster.get("instancemanager", "im-1")
    cluster.put(msgspec.structs.replace(im, status=msgspec.structs.replace(im.status, instance_engines={})))
    [delete] = [c for c in cluster.decide() if c.verb is Verb.DELETE]
    assert command_mode(delete) == "settings-unsynced"


def test_the_policy_lets_its_commands_through_and_nothing_else() -> None:
    cluster = one_node_cluster()
    [patch] = cluster.decide()  # appends SettingSynced: the conditions list
    assert POLICY.check(patch).allowed
    cluster.put(setting("priority-class", "p"))
    [delete] = [c for c in cluster.decide() if c.verb is Verb.DELETE]
    verdict = POLICY.check(delete)
    assert verdict.allowed
    assert (
        FieldValue(path="/metadata/labels/longhorn.io~1component", value="instance-manager") in verdict.guards
    )
    target = Target(kind="InstanceManager", namespace="longhorn-system", name="im-1")
    for path, verb in (("/status/currentState", Verb.PATCH_STATUS), ("/spec/image", Verb.PATCH)):
        other = new_command(
            service="im-restart", verb=verb, target=target, changes=(FieldValue(path=path, value="x"),)
        )
        assert not POLICY.check(other).allowed
    assert not POLICY.check(new_command(service="im-restart", verb=Verb.DELETE, target=target)).allowed


def test_the_observed_version_of_what_it_writes_comes_from_its_view() -> None:
    """The kit's takeover asks which written objects the view still shows older (lagging writes);
    im-restart answers from its own records, not from a per-event book of resourceVersions."""
    cluster = one_node_cluster()
    im, pod = cluster.get("instancemanager", "im-1"), cluster.get("pod", "im-1")
    decider = cluster.decider
    on = "longhorn-system"
    assert decider.observed_version(Target(kind="InstanceManager", namespace=on, name="im-1")) == int(
        im.metadata.resource_version
    )
    assert decider.observed_version(Target(kind="Pod", namespace=on, name="im-1")) == int(
        pod.metadata.resource_version
    )
    assert decider.observed_version(Target(kind="Pod", namespace=on, name="other")) is None
    cluster.delete("pod", "im-1")
    assert decider.observed_version(Target(kind="Pod", namespace=on, name="im-1")) is None
