"""The chart puts corral in its release's namespace with names from the release, its grants in
Longhorn's namespace, RBAC derived from the actuator's policy, and gives the decision services no
Kubernetes credentials at all."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from corral_actuator.policy import Policy
from corral_actuator.rbac import ROLE, grants, grants_of
from tests.fixtures.helm import CHART, render
from tests.unit.deploy.manifests import WITH_KUBE, container_env, of_kind, service_entry_points

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ValidatingWebhookConfiguration",
}


GRANTS_ON_LONGHORN = {"Role", "RoleBinding"}
"""What must sit in Longhorn's namespace: the grants that let corral read and act there."""


@pytest.mark.parametrize("longhorn", ["longhorn-system", "storage"])
def test_corrals_objects_go_to_the_release_namespace_named_from_the_release(longhorn: str) -> None:
    """`helm template x -n other`: everything of corral's own is in `other` and named `x-…`; only
    the Roles and RoleBindings on Longhorn's objects are in Longhorn's namespace."""
    docs = render({"longhornNamespace": longhorn}, release="x", namespace="other")
    for doc in docs:
        kind, meta = doc["kind"], doc["metadata"]
        if kind == "CustomResourceDefinition":
            continue  # one per cluster, named by its group
        assert meta["name"].startswith("x-corral-"), (kind, meta["name"])
        assert meta["labels"]["app.kubernetes.io/instance"] == "x", (kind, meta["name"])
        where = meta.get("namespace")
        if kind in CLUSTER_SCOPED:
            assert where is None, meta["name"]
        elif kind in GRANTS_ON_LONGHORN and "bus-init" not in meta["name"]:
            assert where == longhorn, (kind, meta["name"])
        else:
            assert where == "other", (kind, meta["name"], where)
    for binding in [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        assert binding["roleRef"]["name"] == binding["metadata"]["name"]
        for subject in binding["subjects"]:
            assert subject["namespace"] == "other", binding["metadata"]["name"]
            assert subject["name"] in of_kind(docs, "ServiceAccount"), subject
    for name, deployment in of_kind(docs, "Deployment").items():
        env = container_env(deployment)
        assert env["CORRAL_NAMESPACE"] == longhorn  # they watch and act in Longhorn's namespace
        if name != "x-corral-v2-admission":  # the webhook server uses no NATS
            assert env["CORRAL_NATS_URL"] == "nats://x-corral-nats.other.svc:4222"
    policy_map = of_kind(docs, "ConfigMap")["x-corral-actuator-policy"]
    assert set(Policy.from_yaml(policy_map["data"]["actuator-policy.yaml"]).namespaces) == {longhorn}


def test_two_releases_share_no_object_and_select_no_pod_of_the_other() -> None:
    first = render(release="corral-a", namespace="storage")
    second = render(release="corral-b", namespace="storage")

    def names(docs: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] != "CustomResourceDefinition"}

    assert not names(first) & names(second)
    for deployment in of_kind(first, "Deployment").values():
        assert deployment["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == "corral-a"


def test_every_object_has_the_standard_labels_with_the_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for doc in render():
        if doc["kind"] == "CustomResourceDefinition":
            continue
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/version") == chart["appVersion"], doc["metadata"]["name"]
        assert labels.get("app.kubernetes.io/managed-by") == "Helm", doc["metadata"]["name"]
        assert labels.get("app.kubernetes.io/part-of") == "corral", doc["metadata"]["name"]


def test_the_actuator_role_is_what_the_shipped_policy_allows() -> None:
    docs = render({"longhornNamespace": "storage"})
    policy_map = of_kind(docs, "ConfigMap")["corral-actuator-policy"]
    policy = Policy.from_yaml(policy_map["data"]["actuator-policy.yaml"])
    role = of_kind(docs, "Role")[ROLE]
    cluster_role = of_kind(docs, "ClusterRole")[ROLE]
    assert grants_of(role["rules"]) | grants_of(cluster_role["rules"]) == grants(policy)


def test_decision_services_get_no_token_and_no_binding() -> None:
    docs = render()
    deployments = of_kind(docs, "Deployment")
    accounts = of_kind(docs, "ServiceAccount")
    bound = {
        subject["name"]
        for d in docs
        if d["kind"] in ("RoleBinding", "ClusterRoleBinding")
        for subject in d["subjects"]
    }
    decision = set(service_entry_points()) - set(WITH_KUBE)
    assert decision, "no decision service installed?"
    for name in decision:
        pod = deployments[f"corral-{name}"]["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        assert pod["serviceAccountName"] == f"corral-{name}"
        assert accounts[f"corral-{name}"]["automountServiceAccountToken"] is False, name
        assert f"corral-{name}" not in bound, name
        volumes = pod.get("volumes", [])
        # no Kubernetes credentials: the one Secret mounted is its own NATS password
        assert not [v for v in volumes if "projected" in v], name
        secrets = [v["secret"] for v in volumes if "secret" in v]
        assert secrets == [{**secrets[0], "items": [{"key": name, "path": name}]}], name
        assert secrets[0]["secretName"] == "corral-nats-users", name
    for name in WITH_KUBE:
        pod = deployments[f"corral-{name}"]["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is True, name
        assert f"corral-{name}" in bound, name
