"""The engine-image DaemonSets carry group A (tolerations, node selector, priority class) as
Longhorn's setting controller applies it: it collects every DaemonSet labelled
`longhorn.io/managed-by`, engine-image ones included, patches their templates while every volume
is detached, and the actuator's policy lets exactly those fields through (issue 24, behaviour 5:
the templates kept `[]` long after `applied=true`)."""

from __future__ import annotations

import json

import pytest

from corral_actuator.policy import Policy
from corral_model.envelopes import Verb
from tests.unit.actuator.test_policy import POLICY_FILE, cmd
from tests.unit.setting_sync.cluster import NS, Cluster, applied_writes, setting, volume
from tests.unit.setting_sync.test_group_d import engine_cluster, engine_image_daemonset

TOLERATIONS = "/spec/template/spec/tolerations"
LAST_APPLIED = "/spec/template/metadata/annotations/longhorn.io~1last-applied-tolerations"
PRIORITY = "/spec/template/spec/priorityClassName"
SELECTOR = "/spec/template/spec/nodeSelector"
GROUP_A = (
    setting("taint-toleration", "dedicated=storage:NoSchedule"),
    setting("priority-class", "longhorn-critical"),
    setting("system-managed-components-node-selector", "storage:yes"),
)


def _cluster(state: str) -> Cluster:
    return engine_cluster(
        setting("v2-data-engine", "true", applied=True),
        engine_image_daemonset("engine-image-ei-aaaa"),
        volume("pvc-a", state),
    )


def _ei_patches(cluster: Cluster) -> list[dict[str, object]]:
    sent = cluster.decide()
    return [
        {c.path: c.value for c in command.changes}
        for command in sent
        if command.verb is Verb.PATCH and command.target.name == "engine-image-ei-aaaa"
    ]


def test_group_a_patches_the_engine_image_daemonset_template_once_volumes_are_detached() -> None:
    cluster = _cluster("attached")
    cluster.put(*GROUP_A)
    assert _ei_patches(cluster) == [], "group A waits for every volume to be detached"
    cluster.put(volume("pvc-a", "detached"))
    [changes] = _ei_patches(cluster)
    assert changes == {
        TOLERATIONS: [{"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoSchedule"}],
        LAST_APPLIED: json.dumps(
            [{"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoSchedule"}],
            separators=(",", ":"),
        ),
        PRIORITY: "longhorn-critical",
        SELECTOR: {"storage": "yes"},
    }


def test_the_setting_waits_for_the_engine_image_daemonset_until_it_carries_it() -> None:
    cluster = _cluster("detached")
    cluster.put(setting("priority-class", "longhorn-critical"))
    sent = cluster.decide()
    assert applied_writes(sent).get("priority-class") is not True
    [e] = cluster.decider.explain(f"Setting/{NS}/priority-class")
    assert "DaemonSet/engine-image-ei-aaaa" in e.detail, e
    patches = [c for c in sent if c.verb is Verb.PATCH]
    cluster.carry_out(patches)
    assert cluster.get("daemonset", "engine-image-ei-aaaa").spec.template.spec.priority_class_name == (
        "longhorn-critical"
    )
    cluster.decide()
    [e] = cluster.decider.explain(f"Setting/{NS}/priority-class")
    assert "engine-image-ei-aaaa" not in e.detail, e


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.load(POLICY_FILE)


def test_the_actuator_policy_lets_exactly_these_fields_through(policy: Policy) -> None:
    cluster = _cluster("detached")
    cluster.put(*GROUP_A)
    [command] = [c for c in cluster.decide() if c.verb is Verb.PATCH and c.target.name.startswith("engine-")]
    verdict = policy.check(command)
    assert verdict.allowed, verdict.reason
    # ... and nothing beside them on an engine-image DaemonSet (its image, its volumes, a command).
    for path, value in (
        ("/spec/template/spec/containers/0/image", "evil"),
        ("/spec/template/spec/volumes", []),
        ("/spec/template/spec/containers/0/command", ["sh"]),
        ("/spec/template/metadata/annotations/other", "x"),
        ("/spec/template/spec/serviceAccountName", "admin"),
        ("/spec/template/spec/containers/0/resources", {}),
    ):
        other = cmd(
            "setting-sync",
            Verb.PATCH,
            "DaemonSet",
            {path: value},
            name="engine-image-ei-aaaa",
            preconditions={"/metadata/resourceVersion": "12"},
        )
        assert not policy.check(other).allowed, path
