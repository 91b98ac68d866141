"""The chart's v2 live-upgrade admission webhook: the ValidatingWebhookConfiguration kube-apiserver
reads (the webhooks' names are the ones corral_v2admission denies in, narrow selectors, the chosen
failure policies), a serving certificate its caBundle verifies, the server's Deployment configured
with variables it reads, and a read-only Role with just what the rules read."""

from __future__ import annotations

import base64
import shutil
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral_v2_admission.config import AdmissionConfig
from corral_v2_admission.server import PATH
from corral_v2admission import UPGRADES_WEBHOOK, VOLUMES_WEBHOOK
from tests.fixtures.helm import CHART, NAMESPACE, render
from tests.unit.deploy.manifests import WEBHOOK, container_env, of_kind

CONFIGURATION = "corral-v2-admission"


def webhooks(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    configuration = of_kind(docs, "ValidatingWebhookConfiguration")[CONFIGURATION]
    return {w["name"]: w for w in configuration["webhooks"]}


@pytest.mark.parametrize("namespace", ["longhorn-system", "storage"])
def test_the_webhooks_are_narrow_and_fail_as_chosen(namespace: str) -> None:
    docs = render({"longhornNamespace": namespace})
    hooks = webhooks(docs)
    assert set(hooks) == {UPGRADES_WEBHOOK, VOLUMES_WEBHOOK}
    for hook in hooks.values():
        assert hook["sideEffects"] == "None" and hook["admissionReviewVersions"] == ["v1"]
        assert hook["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        (rule,) = hook["rules"]
        assert rule["operations"] == ["CREATE", "UPDATE"] and rule["scope"] == "Namespaced"
        service = hook["clientConfig"]["service"]
        # the server is corral's own, in the release's namespace; it judges Longhorn's
        assert service == {"name": WEBHOOK, "namespace": NAMESPACE, "path": PATH, "port": 443}
    upgrades, volumes = hooks[UPGRADES_WEBHOOK], hooks[VOLUMES_WEBHOOK]
    assert upgrades["failurePolicy"] == "Fail" and volumes["failurePolicy"] == "Ignore"
    assert upgrades["rules"][0]["apiGroups"] == ["corral.longhorn.io"]
    assert upgrades["rules"][0]["resources"] == ["dataengineupgrademanagers", "nodedataengineupgrades"]
    assert volumes["rules"][0]["apiGroups"] == ["longhorn.io"] and volumes["rules"][0]["resources"] == [
        "volumes"
    ]
    (condition,) = volumes["matchConditions"]
    assert "dataEngine == 'v2'" in condition["expression"]
    assert "targetNodeIDForLiveUpgrade != ''" in condition["expression"]
    # status writes are never sent: the rules name the main resources only
    assert not [r for h in hooks.values() for r in h["rules"][0]["resources"] if "/" in r]
    service = of_kind(docs, "Service")[WEBHOOK]
    (port,) = service["spec"]["ports"]
    assert port["port"] == 443 and port["targetPort"] == "webhook"


def test_volume_reviews_can_include_every_volume() -> None:
    hooks = webhooks(render({"v2Admission.volumeMatchConditions": "false"}))
    assert "matchConditions" not in hooks[VOLUMES_WEBHOOK]


def test_the_ca_bundle_verifies_the_serving_certificate(tmp_path: Path) -> None:
    docs = render()
    secret = of_kind(docs, "Secret")[f"{CONFIGURATION}-tls"]
    assert secret["type"] == "kubernetes.io/tls"
    bundle = webhooks(docs)[UPGRADES_WEBHOOK]["clientConfig"]["caBundle"]
    assert bundle == secret["data"]["ca.crt"] == webhooks(docs)[VOLUMES_WEBHOOK]["clientConfig"]["caBundle"]
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    openssl = shutil.which("openssl")
    assert openssl is not None, "openssl is needed to check the certificate"
    verified = subprocess.run(
        [openssl, "verify", "-CAfile", str(tmp_path / "ca.crt"), str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    text = subprocess.run(
        [openssl, "x509", "-noout", "-text", "-in", str(tmp_path / "tls.crt")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "DNS:corral-v2-admission.longhorn-system.svc" in text
    template = (CHART / "templates" / "v2-admission.yaml").read_text()
    assert 'lookup "v1" "Secret"' in template  # an upgrade keeps the certificate the caBundle names


def test_the_server_runs_as_configured() -> None:
    docs = render()
    deployment = of_kind(docs, "Deployment")[WEBHOOK]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["python", "-m", "corral_v2_admission"]
    assert deployment["spec"]["replicas"] == 1  # manager creates are serialised in the process
    env = container_env(deployment)
    fields = {f"CORRAL_{f.name.upper()}" for f in msgspec.structs.fields(AdmissionConfig)}
    assert set(env) <= fields, set(env) - fields
    assert env["CORRAL_TLS_CERT_FILE"] == "/etc/corral/webhook-tls/tls.crt"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"webhook": int(env["CORRAL_WEBHOOK_PORT"] or 0), "http": 8080}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    (tls,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == f"{CONFIGURATION}-tls"
    assert pod["serviceAccountName"] == WEBHOOK and pod["automountServiceAccountToken"] is True


def test_the_role_only_reads_what_the_rules_ask() -> None:
    docs = render()
    role = of_kind(docs, "Role")[WEBHOOK]
    assert role["rules"] == [
        {"apiGroups": ["corral.longhorn.io"], "resources": ["dataengineupgrademanagers"], "verbs": ["list"]},
        {"apiGroups": ["longhorn.io"], "resources": ["nodes"], "verbs": ["list"]},
        {
            "apiGroups": ["longhorn.io"],
            "resources": ["settings"],
            "resourceNames": ["default-instance-manager-image"],
            "verbs": ["get"],
        },
    ]
    binding = of_kind(docs, "RoleBinding")[WEBHOOK]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": WEBHOOK, "namespace": "longhorn-system"}
    ]
    assert not [d for d in docs if d["kind"] == "ClusterRoleBinding" and d["metadata"]["name"] == WEBHOOK]


def test_cert_manager_issues_the_certificate_instead() -> None:
    docs = render({"v2Admission.tls.certManager.enabled": "true"})
    certificate = of_kind(docs, "Certificate")[WEBHOOK]
    assert f"{CONFIGURATION}-tls" not in of_kind(docs, "Secret")
    configuration = of_kind(docs, "ValidatingWebhookConfiguration")[CONFIGURATION]
    annotation = configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert annotation == f"longhorn-system/{WEBHOOK}"
    assert all("caBundle" not in w["clientConfig"] for w in configuration["webhooks"])
    assert certificate["spec"]["secretName"] == f"{CONFIGURATION}-tls"
    assert "corral-v2-admission.longhorn-system.svc" in certificate["spec"]["dnsNames"]
    assert certificate["spec"]["issuerRef"]["name"] in of_kind(docs, "Issuer")
    given = render(
        {"v2Admission.tls.certManager.enabled": "true", "v2Admission.tls.certManager.issuer": "ca"}
    )
    assert not of_kind(given, "Issuer")
    assert of_kind(given, "Certificate")[WEBHOOK]["spec"]["issuerRef"]["name"] == "ca"


def test_the_webhook_can_be_turned_off() -> None:
    docs = render({"v2Admission.enabled": "false"})
    assert not of_kind(docs, "ValidatingWebhookConfiguration")
    assert not [d for d in docs if d["metadata"]["name"].startswith(CONFIGURATION)]


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="go together"):
        AdmissionConfig(tls_cert_file="/tls.crt")
