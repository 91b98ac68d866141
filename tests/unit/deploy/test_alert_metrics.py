"""The chart's alerts and Grafana dashboard query metrics the services really export.

The exported names come from the services' own collectors, built here as each service builds them
(the harness's gauges, the decision kit's runner metrics with each service's scrape-time gauges,
the watcher's and the actuator's), so renaming a metric breaks this test instead of an alert
silently matching nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from corral_actuator.runner import ActuatorMetrics
from corral_decision.metrics import RunnerMetrics
from corral_decision.service import DecisionService
from corral_engine_upgrade.service import DEFINITION as ENGINE_UPGRADE
from corral_im_restart.service import DEFINITION as IM_RESTART
from corral_runtime.metrics import ServiceMetrics
from corral_setting_sync.service import DEFINITION as SETTING_SYNC
from corral_watcher.metrics import WatcherMetrics
from tests.fixtures.helm import CHART, render
from tests.unit.deploy.manifests import of_kind

MONITORING = {
    "metrics.prometheusRule.enabled": "true",
    "metrics.grafanaDashboard.enabled": "true",
    "metrics.serviceMonitor.enabled": "true",
}
METRIC = re.compile(r"\bcorral_[a-z_]+\b")
NAME_PATTERN = re.compile(r'__name__=~"([^"]+)"')


def exported_names() -> set[str]:
    """Every sample name the services expose on /metrics (counters with their `_total`)."""
    registry = CollectorRegistry()
    ServiceMetrics(registry, "test", "test-0")
    WatcherMetrics(registry)
    ActuatorMetrics(registry)
    services: tuple[DecisionService[Any], ...] = (ENGINE_UPGRADE, SETTING_SYNC, IM_RESTART)
    for service in services:
        decider = service.new_decider(service.config(), lambda: 0.0)
        RunnerMetrics(service.metric_prefix, registry, decider, service.gauges)
    names = set()
    for family in registry.collect():
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":  # a labelled counter has no sample until it counts something
            names.add(f"{family.name}_total")
    return names


def _queried(expressions: list[str]) -> tuple[set[str], set[str]]:
    """Metric names used in PromQL expressions, and the `__name__=~` patterns."""
    text = "\n".join(expressions)
    patterns = set(NAME_PATTERN.findall(text))
    names = set(METRIC.findall(NAME_PATTERN.sub("", text))) - {"corral_service"}  # a label
    return names, patterns


def test_alerts_query_exported_metrics() -> None:
    rule = of_kind(render(MONITORING), "PrometheusRule")["corral"]
    alerts = {r["alert"]: r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]}
    assert set(alerts) == {"CorralEngineUpgradeWaveStuck", "CorralDeadLettersGrowing", "CorralNoLeader"}
    exported = exported_names()
    names, patterns = _queried(list(alerts.values()))
    assert names, alerts
    assert names <= exported, names - exported
    for pattern in patterns:
        assert {n for n in exported if re.fullmatch(pattern, n)}, pattern


def test_dashboard_queries_exported_metrics() -> None:
    dashboard_map = of_kind(render(MONITORING), "ConfigMap")["corral-dashboard"]
    (text,) = dashboard_map["data"].values()
    dashboard = json.loads(text)
    assert dashboard == json.loads((Path(CHART) / "files" / "dashboards" / "corral-wave.json").read_text())
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exported = exported_names()
    names, patterns = _queried(expressions)
    assert "corral_engine_upgrade_in_flight" in names  # the wave per owner node
    assert names <= exported, names - exported
    for pattern in patterns:
        assert {n for n in exported if re.fullmatch(pattern, n)}, pattern


def test_a_misnamed_metric_would_be_caught() -> None:
    names, _ = _queried(["sum(corral_engine_upgrade_inflight)"])
    assert not names <= exported_names()
