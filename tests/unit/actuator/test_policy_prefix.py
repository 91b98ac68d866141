"""Workloads known only by a name prefix (the engine-image DaemonSets, `engine-image-ei-<hash>`):
setting-sync may set their liveness probe's integer leaves and their template's group A fields
(tolerations, last-applied tolerations, priority class, node selector) and nothing else, on a
labelled object whose name has the prefix; the loader refuses any wider namePrefix rule."""

from __future__ import annotations

from typing import Any

import pytest

from corral_actuator.policy import Policy, PolicyError
from corral_model.envelopes import Verb
from tests.unit.actuator.test_policy import HEAD, POLICY_FILE, cmd

PROBE = "/spec/template/spec/containers/0/livenessProbe/"
VERSION = {"/metadata/resourceVersion": "12"}


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.load(POLICY_FILE)


def probe_patch(name: str, changes: dict[str, Any]) -> Any:
    return cmd("setting-sync", Verb.PATCH, "DaemonSet", changes, name=name, preconditions=VERSION)


def test_probe_leaves_of_an_engine_image_daemonset_with_its_label_guard(policy: Policy) -> None:
    verdict = policy.check(probe_patch("engine-image-ei-1a2b", {PROBE + "periodSeconds": 30}))
    assert verdict.allowed
    assert [(g.path, g.value) for g in verdict.guards] == [
        ("/metadata/labels/longhorn.io~1component", "engine-image")
    ]


@pytest.mark.parametrize(
    ("name", "changes", "why"),
    [
        ("kube-proxy", {PROBE + "periodSeconds": 30}, ""),
        ("longhorn-manager", {PROBE + "timeoutSeconds": 3}, ""),
        ("engine-image-ei-1a2b", {PROBE + "exec": {"command": ["sh"]}}, "not writable"),
        ("engine-image-ei-1a2b", {"/spec/template/spec/containers/0/image": "evil"}, "not writable"),
        ("engine-image-ei-1a2b", {PROBE + "periodSeconds": "30"}, ""),
        ("engine-image-ei-1a2b", {PROBE + "periodSeconds": -1}, ""),
        ("engine-image-ei-1a2b", {PROBE + "periodSeconds": True}, ""),
    ],
)
def test_anything_else_is_refused(policy: Policy, name: str, changes: dict[str, Any], why: str) -> None:
    verdict = policy.check(probe_patch(name, changes))
    assert not verdict.allowed and why in verdict.reason


def test_the_csi_plugin_keeps_its_named_rule(policy: Policy) -> None:
    """Group A's template fields on both; the CSI resources only on the csi-plugin."""
    tolerations: dict[str, Any] = {"/spec/template/spec/tolerations": []}
    assert policy.check(probe_patch("longhorn-csi-plugin", tolerations)).allowed
    assert policy.check(probe_patch("engine-image-ei-1a2b", tolerations)).allowed
    resources: dict[str, Any] = {"/spec/template/spec/containers/0/resources": {}}
    assert policy.check(probe_patch("longhorn-csi-plugin", resources)).allowed
    assert not policy.check(probe_patch("engine-image-ei-1a2b", resources)).allowed


RULE = "services: {s: {rules: [{kind: daemonset, namePrefix: engine-image-, %s}]}}\n"
LABEL = "require: [{path: /metadata/labels/a, value: b}]"
LEAF_PATH = "/spec/template/spec/containers/*/livenessProbe/periodSeconds"
LEAF = f"{{path: {LEAF_PATH}, integer: true}}"


@pytest.mark.parametrize(
    "rule",
    [
        f"verbs: [patch], fields: [{LEAF}]",  # no label required
        f"verbs: [patch, delete], {LABEL}, fields: [{LEAF}]",
        f"verbs: [patch], {LABEL}, fields: [{{path: /spec/template/spec/containers/*/livenessProbe}}]",
        f"verbs: [patch], {LABEL}, fields: [{{path: {LEAF_PATH}}}]",  # not marked integer
        f"verbs: [patch], {LABEL}, fields: [{{path: /spec/template/spec/containers/*/image, integer: true}}]",
        f"verbs: [patch], names: [x], {LABEL}, fields: [{LEAF}]",
        # a parent of the group A fields would let a command or a volume in
        f"verbs: [patch], {LABEL}, fields: [{{path: /spec/template/spec}}]",
        f"verbs: [patch], {LABEL}, fields: [{{path: /spec/template/metadata/annotations}}]",
        f"verbs: [patch], {LABEL}, fields: [{{path: /spec/template/spec/tolerations, valueFromSetting: x}}]",
    ],
)
def test_a_wider_prefix_rule_is_refused(rule: str) -> None:
    with pytest.raises(PolicyError):
        Policy.from_yaml(HEAD + RULE % rule)


def test_the_narrow_prefix_rule_loads() -> None:
    Policy.from_yaml(HEAD + RULE % f"verbs: [patch], {LABEL}, fields: [{LEAF}]")
    group_a = (
        "/spec/template/spec/tolerations",
        "/spec/template/metadata/annotations/longhorn.io~1last-applied-tolerations",
        "/spec/template/spec/priorityClassName",
        "/spec/template/spec/nodeSelector",
    )
    fields = ", ".join(f"{{path: {p}}}" for p in group_a)
    Policy.from_yaml(HEAD + RULE % f"verbs: [patch], {LABEL}, fields: [{LEAF}, {fields}]")


def test_instance_manager_deletes_must_name_their_data_engine(policy: Policy) -> None:
    guard = {"/metadata/uid": "u", "/metadata/resourceVersion": "3"}
    ok = cmd(
        "setting-sync", Verb.DELETE, "InstanceManager", preconditions={**guard, "/spec/dataEngine": "v2"}
    )
    assert policy.check(ok).allowed
    bare = cmd("setting-sync", Verb.DELETE, "InstanceManager", preconditions=guard)
    assert not policy.check(bare).allowed


@pytest.mark.parametrize("value", ["30", -1, True, 2.5, None])
def test_an_integer_leaf_takes_only_non_negative_integers(value: Any) -> None:
    narrow = Policy.from_yaml(HEAD + RULE % f"verbs: [patch], {LABEL}, fields: [{LEAF}]")
    bad = cmd(
        "s", Verb.PATCH, "DaemonSet", {PROBE + "periodSeconds": value}, name="engine-image-x", namespace="ns"
    )
    verdict = narrow.check(bad)
    assert not verdict.allowed and "non-negative integer" in verdict.reason
    good = cmd(
        "s", Verb.PATCH, "DaemonSet", {PROBE + "periodSeconds": 7}, name="engine-image-x", namespace="ns"
    )
    assert narrow.check(good).allowed
