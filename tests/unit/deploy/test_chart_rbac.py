"""The chart puts corral in the namespace its values name, RBAC derived from the actuator's policy,
and gives the decision services no Kubernetes credentials at all."""

from __future__ import annotations

import pytest

from corral_actuator.policy import Policy
from corral_actuator.rbac import ROLE, grants, grants_of
from tests.fixtures.helm import render
from tests.unit.deploy.manifests import WITH_KUBE, container_env, of_kind, service_entry_points

CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "ValidatingWebhookConfiguration",
}


@pytest.mark.parametrize("namespace", ["longhorn-system", "storage"])
def test_every_namespaced_object_goes_to_the_longhorn_namespace(namespace: str) -> None:
    docs = render({"longhornNamespace": namespace})
    for doc in docs:
        where = doc["metadata"].get("namespace")
        if doc["kind"] in CLUSTER_SCOPED:
            assert where is None, doc["metadata"]["name"]
        else:
            assert where == namespace, (doc["kind"], doc["metadata"]["name"], where)
    for binding in [d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")]:
        for subject in binding["subjects"]:
            assert subject["namespace"] == namespace, binding["metadata"]["name"]


def test_moving_the_namespace_moves_roles_bindings_and_the_policy() -> None:
    docs = render({"longhornNamespace": "storage"})
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "Role"} >= {
        "corral-watcher",
        "corral-actuator",
        "corral-pre-upgrade",
    }
    assert not [d for d in docs if d["metadata"].get("namespace") == "longhorn-system"]
    policy_map = of_kind(docs, "ConfigMap")["corral-actuator-policy"]
    policy = Policy.from_yaml(policy_map["data"]["actuator-policy.yaml"])
    assert set(policy.namespaces) == {"storage"}
    deployments = of_kind(docs, "Deployment")
    for name, deployment in deployments.items():
        env = container_env(deployment)
        assert env["CORRAL_NAMESPACE"] == "storage"
        if name != "corral-v2-admission":  # the webhook server uses no NATS
            assert env["CORRAL_NATS_URL"] == "nats://corral-nats.storage.svc:4222"


def test_the_actuator_role_is_what_the_shipped_policy_allows() -> None:
    docs = render({"longhornNamespace": "storage"})
    policy_map = of_kind(docs, "ConfigMap")["corral-actuator-policy"]
    policy = Policy.from_yaml(policy_map["data"]["actuator-policy.yaml"])
    role = of_kind(docs, "Role")[ROLE]
    assert grants_of(role["rules"]) == grants(policy)


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
