"""deploy/rbac grants the actuator exactly what its policy allows, and the decision services nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from corral_actuator.policy import Policy
from corral_actuator.rbac import ANY, ROLE, SERVICE_ACCOUNT, cluster_scoped, grants, grants_of, may, render
from corral_decision.registry import decision_services
from corral_model.kinds import KINDS

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
POLICY = Policy.load(DEPLOY / "policy" / "actuator-policy.yaml")
DECISION_SERVICES = set(decision_services())


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all_rbac_docs() -> list[dict[str, Any]]:
    return [d for path in sorted((DEPLOY / "rbac").glob("*.yaml")) for d in _docs(path)]


def test_actuator_role_grants_exactly_what_the_policy_allows() -> None:
    docs = _docs(DEPLOY / "rbac" / "actuator.yaml")
    roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == ROLE]
    assert {r["metadata"]["namespace"] for r in roles} == set(POLICY.namespaces)
    namespaced = {g for g in grants(POLICY) if not cluster_scoped(g[0], g[1])}
    for role in roles:
        assert grants_of(role["rules"]) == namespaced
    # Outside namespaces, only listing the nodes a node selector must match.
    [cluster_role] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert grants_of(cluster_role["rules"]) == {("", "nodes", "list", ANY)} == grants(POLICY) - namespaced
    [binding] = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == cluster_role["metadata"]["name"] == ROLE
    assert [s["name"] for s in binding["subjects"]] == [SERVICE_ACCOUNT]


def test_expected_grants_follow_from_the_policy() -> None:
    expected = grants(POLICY)
    assert ("longhorn.io", "volumes", "patch", ANY) in expected
    assert ("longhorn.io", "settings/status", "patch", ANY) in expected
    assert ("longhorn.io", "settings", "get", ANY) in expected  # default-engine-image is read live
    assert ("", "pods", "delete", ANY) in expected
    assert ("", "events", "create", ANY) in expected
    assert ("longhorn.io", "engineimages", "list", ANY) in expected  # the start-up gate's read
    assert ("longhorn.io", "settings", "patch", ANY) not in expected  # only the status subresource
    assert ("longhorn.io", "volumes", "delete", ANY) not in expected
    assert not any(verb in ("watch", "update", "deletecollection", "*") for _, _, verb, _ in expected)
    # the start-up gate's read, the count of upgrades in flight per owner node, and the nodes a
    # node selector must match
    assert {(g, r) for g, r, verb, _ in expected if verb == "list"} == {
        ("longhorn.io", "engineimages"),
        ("longhorn.io", "volumes"),
        ("", "nodes"),
    }


def test_workloads_are_granted_by_name_only() -> None:
    """The Longhorn Deployments longhorn-manager manages (spec §3.3) by name, never corral's own.
    DaemonSets are granted by kind in Longhorn's namespace: the engine-image DaemonSets are named
    after an image hash, so only the policy can hold them (by prefix, label and integer probe
    leaves; tests/unit/actuator/test_policy_prefix.py), not RBAC."""
    expected = grants(POLICY)
    workloads = {(r, v, n) for g, r, v, n in expected if g == "apps"}
    assert workloads == {
        *(("daemonsets", verb, ANY) for verb in ("get", "patch")),
        *(
            ("deployments", verb, name)
            for name in ("csi-attacher", "csi-provisioner", "csi-resizer", "csi-snapshotter")
            for verb in ("get", "patch")
        ),
    }
    role = next(d for d in _docs(DEPLOY / "rbac" / "actuator.yaml") if d["kind"] == "Role")
    granted = grants_of(role["rules"])
    assert may(granted, "apps", "deployments", "patch", "csi-attacher")
    for own in ("corral-actuator", "corral-engine-upgrade", "corral-watcher"):
        assert not may(granted, "apps", "deployments", "patch", own)
    for rule in role["rules"]:
        if rule["resources"] == ["deployments"]:
            assert rule.get("resourceNames"), rule


def test_a_grant_on_any_object_absorbs_the_named_ones() -> None:
    text = (DEPLOY / "policy" / "actuator-policy.yaml").read_text()
    both = Policy.from_yaml(
        text.replace(
            "  watcher: {}",
            "  watcher:\n    rules:\n      - kind: pod\n        verbs: [delete]\n        names: [p]\n"
            "      - kind: replica\n        verbs: [delete]\n        names: [r]",
        )
    )
    pods = {g for g in grants(both) if g[1] == "pods"}
    assert pods == {("", "pods", "delete", ANY), ("", "pods", "get", ANY)}
    replicas = {g for g in grants(both) if g[1] == "replicas" and g[2] == "delete"}
    assert replicas == {("longhorn.io", "replicas", "delete", ANY)}


def test_actuator_yaml_is_what_the_generator_writes() -> None:
    assert (DEPLOY / "rbac" / "actuator.yaml").read_text() == render(POLICY)


def test_role_is_bound_to_the_actuator_service_account_only() -> None:
    bindings = [d for d in _all_rbac_docs() if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    for binding in bindings:
        if binding["roleRef"]["name"] == ROLE:
            assert [s["name"] for s in binding["subjects"]] == [SERVICE_ACCOUNT]


def test_decision_services_have_no_kubernetes_credentials() -> None:
    docs = _all_rbac_docs()
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    for service in DECISION_SERVICES:
        account = accounts[f"corral-{service}"]
        assert account["automountServiceAccountToken"] is False
    bound = {
        s["name"]
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for s in d.get("subjects", [])
    }
    assert not bound & {f"corral-{s}" for s in DECISION_SERVICES}


def test_watcher_reads_exactly_the_watched_kinds_and_writes_nothing() -> None:
    docs = _docs(DEPLOY / "rbac" / "watcher.yaml")
    roles = [d for d in docs if d["kind"] in ("Role", "ClusterRole")]
    granted = set().union(*(grants_of(r["rules"]) for r in roles))
    expected = {(k.group, k.plural, verb, ANY) for k in KINDS.values() for verb in ("get", "list", "watch")}
    assert granted == expected
    cluster_wide = set().union(*(grants_of(r["rules"]) for r in roles if r["kind"] == "ClusterRole"))
    assert {(g, p) for g, p, _, _ in cluster_wide} == {
        (k.group, k.plural) for k in KINDS.values() if not k.namespaced
    }
