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
from corral_decision.coexistence import Coexistence, Mode
from corral_decision.events import EventType, event_command
from corral_decision.metrics import RunnerMetrics
from corral_decision.registry import decision_services
from corral_engine_upgrade.service import upgrade_mode
from corral_model.envelopes import Target, Verb, new_command
from corral_runtime.metrics import ServiceMetrics
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
    for service in decision_services().values():
        decider = service.new_decider(service.config(), lambda: 0.0)
        RunnerMetrics(service.metric_prefix, registry, decider, service.gauges)
        Coexistence(service.name, service.longhorn_loop, Mode.AUTO, "ns", decider, registry)
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


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(
        (Path(CHART) / "files" / "dashboards" / "corral-wave.json").read_text()
    )
    return loaded


def test_upgrades_are_counted_from_upgrade_commands_only() -> None:
    """engine-upgrade publishes Events too (started, blocked…), rollbacks and the wave's pause mark:
    they are modes event, rollback and pause, and what counts upgrades (the dashboard's, the
    stuck-wave alert) counts only live and offline."""
    volume = Target(kind="Volume", namespace="ns", name="v")
    event = event_command(
        service="engine-upgrade",
        about=volume,
        type_=EventType.NORMAL,
        reason="EngineUpgradeStarted",
        message="started",
        now=0.0,
    )
    upgrade = new_command(service="engine-upgrade", verb=Verb.PATCH, target=volume, reason="live upgrade")
    rollback = new_command(
        service="engine-upgrade", verb=Verb.PATCH, target=volume, reason="rollback of a stuck engine upgrade"
    )
    mark = new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="EngineImage", namespace="ns", name="ei-1"),
        reason="pause the engine upgrade wave: 1: why",
    )
    modes = [upgrade_mode(c) for c in (event, upgrade, rollback, mark)]
    assert modes == ["event", "live", "rollback", "pause"]
    rule = of_kind(render(MONITORING), "PrometheusRule")["corral"]
    expressions = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    expressions += [t["expr"] for panel in _dashboard()["panels"] for t in panel["targets"]]
    counted = [e for e in expressions if "corral_engine_upgrade_commands_total" in e]
    assert len(counted) == 3, counted  # the alert, "Upgrades started", "Upgrades started per minute"
    assert all('mode=~"live|offline"' in e for e in counted), counted


def test_the_dashboard_shows_every_decision_service_and_its_stance() -> None:
    patterns = [
        p
        for panel in _dashboard()["panels"]
        for t in panel["targets"]
        for p in NAME_PATTERN.findall(t["expr"])
    ]
    for service in decision_services().values():
        for suffix in ("coexistence", "longhorn_loop_on", "commands_total", "withheld_commands_total"):
            name = f"{service.metric_prefix}_{suffix}"
            assert any(re.fullmatch(p, name) for p in patterns), name
