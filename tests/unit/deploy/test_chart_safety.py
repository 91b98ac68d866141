"""The chart is safe beside a running Longhorn and under GitOps: decision services default to mode
auto with corral's own per-node limit, every variable it sets is one the service reads, its values
are checked by a schema, two renders are the same, and nothing of it blocks a node drain or opens
NATS to the cluster."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from corral_actuator.config import ActuatorConfig
from corral_decision.registry import decision_services
from corral_runtime.config import unknown_variables
from corral_watcher.config import WatcherConfig
from tests.fixtures.helm import CHART, helm, render, render_text, set_args
from tests.unit.deploy.manifests import bus_deployments, container_env, of_kind, service_entry_points

DECISION = sorted(decision_services())


def _env(docs: list[dict[str, Any]], service: str) -> dict[str, str | None]:
    return container_env(bus_deployments(docs)[f"corral-{service}"])


def test_decision_services_default_to_mode_auto_with_corrals_own_limit() -> None:
    docs = render()
    assert DECISION and set(DECISION) <= set(service_entry_points())
    for service in DECISION:
        assert _env(docs, service)["CORRAL_MODE"] == "auto", service
    assert _env(docs, "engine-upgrade")["CORRAL_PER_NODE_LIMIT"] == "1"
    assert _env(docs, "actuator")["CORRAL_PER_NODE_LIMIT"] == "1"
    for service in ("watcher", "actuator"):  # no loop of Longhorn's to coexist with: no mode
        assert "CORRAL_MODE" not in _env(docs, service)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["mode"] == "auto"


def test_the_mode_limit_and_extra_environment_are_values() -> None:
    docs = render(
        {
            "mode": "observe",
            "services.engine-upgrade.mode": "act",
            "services.engine-upgrade.perNodeLimit": "3",
            "extraEnv[0].name": "CORRAL_LOG_LEVEL",
            "extraEnv[0].value": "debug",
            "services.setting-sync.extraEnv[0].name": "CORRAL_DEBOUNCE_S",
            "services.setting-sync.extraEnv[0].value": "0.5",
        }
    )
    assert _env(docs, "engine-upgrade")["CORRAL_MODE"] == "act"
    assert _env(docs, "engine-upgrade")["CORRAL_PER_NODE_LIMIT"] == "3"
    # The actuator holds engine-upgrade's own limit while Longhorn's is 0: always the same value.
    assert _env(docs, "actuator")["CORRAL_PER_NODE_LIMIT"] == "3"
    assert _env(docs, "im-restart")["CORRAL_MODE"] == "observe"
    container = bus_deployments(docs)["corral-setting-sync"]["spec"]["template"]["spec"]["containers"][0]
    names = [e["name"] for e in container["env"]]
    # later entries win in Kubernetes: extra ones come after the chart's own
    assert names[-2:] == ["CORRAL_LOG_LEVEL", "CORRAL_DEBOUNCE_S"]
    assert container["env"][-1]["value"] == "0.5"


def test_every_variable_the_chart_sets_is_one_the_service_reads() -> None:
    """No service of a default install warns about its own chart's environment."""
    configs: dict[str, type[Any]] = {name: d.config for name, d in decision_services().items()}
    configs |= {"watcher": WatcherConfig, "actuator": ActuatorConfig}
    docs = render()
    for service, config in configs.items():
        env = {k: v or "" for k, v in _env(docs, service).items()}
        assert unknown_variables(config, environ=env) == [], service


BAD_VALUES = {
    "maxUnavailable not a number": {"podDisruptionBudget.maxUnavailable": "abc"},
    "a password in the NATS URL": {"nats.enabled": "false", "nats.url": "nats://reader:secret@nats:4222"},
    "an unknown mode": {"mode": "replce"},
    "an unknown per-service mode": {"services.im-restart.mode": "always"},
    "a misspelt top-level value": {"longhornNamespce": "storage"},
    "a negative per-node limit": {"services.engine-upgrade.perNodeLimit": "-1"},
    "a bad namespace": {"longhornNamespace": "Longhorn_System"},
}


@pytest.mark.parametrize("name", sorted(BAD_VALUES))
def test_the_schema_refuses_bad_values(name: str) -> None:
    done = helm("template", "corral", str(CHART), *set_args(BAD_VALUES[name]))
    assert done.returncode != 0
    assert "schema" in done.stderr, done.stderr


def test_the_schema_accepts_what_an_operator_sets() -> None:
    good = {
        "podDisruptionBudget.maxUnavailable": "50%",
        "nats.enabled": "false",
        "nats.url": "tls://nats.messaging.svc:4222",
        "mode": "replace",
        "services.engine-upgrade.perNodeLimit": "2",
    }
    done = helm("template", "corral", str(CHART), *set_args(good))
    assert done.returncode == 0, done.stderr


GITOPS = {"v2Admission.tls.existingSecret": "corral-webhook-tls", "v2Admission.tls.caBundle": "Q0E="}
"""What a GitOps install sets: the webhook's certificate from a Secret of its own (or cert-manager)."""


@pytest.mark.parametrize("values", [GITOPS, {"v2Admission.tls.certManager.enabled": "true"}])
def test_two_renders_are_identical_so_no_secret_changes(values: dict[str, str]) -> None:
    first, second = render_text(values), render_text(values)
    assert first == second
    assert not [d for d in yaml.safe_load_all(first) if d and d["kind"] == "Secret"]


def test_by_default_only_the_webhook_certificate_is_made_at_render() -> None:
    """The NATS passwords never are (the bus-init Job makes them); the chart-made webhook certificate
    is read back by `lookup` under `helm install/upgrade` and is the one thing GITOPS replaces."""
    first = [d for d in yaml.safe_load_all(render_text()) if d and d["kind"] == "Secret"]
    second = [d for d in yaml.safe_load_all(render_text()) if d and d["kind"] == "Secret"]
    assert [d["metadata"]["name"] for d in first] == ["corral-v2-admission-tls"]
    assert first != second  # why GITOPS exists


def test_budgets_never_block_a_drain() -> None:
    budgets = of_kind(render(), "PodDisruptionBudget")
    assert set(budgets) >= {f"corral-{name}" for name in service_entry_points()} | {"corral-nats"}
    for name, budget in budgets.items():
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow", name


def test_nats_is_reachable_only_from_the_releases_pods() -> None:
    docs = render()
    policy = of_kind(docs, "NetworkPolicy")["corral-nats"]
    nats = of_kind(docs, "StatefulSet")["corral-nats"]
    assert policy["spec"]["podSelector"]["matchLabels"] == nats["spec"]["selector"]["matchLabels"]
    client, cluster = policy["spec"]["ingress"]
    assert client["ports"] == [{"port": 4222, "protocol": "TCP"}]
    (peer,) = client["from"]
    assert peer == {
        "podSelector": {
            "matchLabels": {"app.kubernetes.io/part-of": "corral", "app.kubernetes.io/instance": "corral"}
        }
    }
    # every pod that connects to NATS carries those labels
    for workload in [*bus_deployments(docs).values(), *of_kind(docs, "Job").values()]:
        labels = workload["spec"]["template"]["metadata"].get("labels", {})
        assert peer["podSelector"]["matchLabels"].items() <= labels.items(), workload["metadata"]["name"]
    assert cluster["from"] == [{"podSelector": {"matchLabels": nats["spec"]["selector"]["matchLabels"]}}]
    assert not of_kind(render({"networkPolicy.enabled": "false"}), "NetworkPolicy")


def test_priority_class_spread_and_the_nats_storage_class() -> None:
    docs = render(
        {
            "priorityClassName": "storage-critical",
            "topologySpreadConstraints[0].maxSkew": "1",
            "topologySpreadConstraints[0].topologyKey": "kubernetes.io/hostname",
            "topologySpreadConstraints[0].whenUnsatisfiable": "ScheduleAnyway",
            "nats.storageClass": "local-path",
        }
    )
    workloads = [*of_kind(docs, "Deployment").values(), *of_kind(docs, "StatefulSet").values()]
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["priorityClassName"] == "storage-critical", workload["metadata"]["name"]
        if workload["metadata"]["name"] == "corral-v2-admission":
            continue  # one replica: nothing to spread
        (spread,) = pod["topologySpreadConstraints"]
        assert spread["labelSelector"]["matchLabels"] == workload["spec"]["selector"]["matchLabels"]
        assert spread["topologyKey"] == "kubernetes.io/hostname"
    (claim,) = of_kind(docs, "StatefulSet")["corral-nats"]["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["storageClassName"] == "local-path"
    values_text = (CHART / "values.yaml").read_text()
    assert "do not keep corral's store on a volume corral itself" in values_text.replace("\n  # ", " ")
