"""Adding a service is one place (issue 26, item 5): its package declares it, and every other place
that must know it is derived from that declaration or checked against it here.

The registry is the entry points a service's own pyproject.toml declares: `corral.services` (every
service on the bus: its name → the package `python -m` runs) and, for a decision service,
`corral.deciders` (its `DecisionService`: what it reads and what it commands). The places outside
the package that name services each get a check below that fails naming the place and what it lacks
or has too much, so a service declared in one and not another says where to add it. Places checked
elsewhere, by richer tests, are listed in `CHECKED_ELSEWHERE`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from corral_bus.permissions import ADMIN, READER, USERS
from corral_decision.registry import decision_services
from corral_model.subjects import DECISION_SERVICES, GATE_SERVICE
from tests.unit.deploy.manifests import WEBHOOK, service_entry_points
from tests.unit.workspace import ROOT, root_pyproject, workspace_members

LEADER_ELECTING_BESIDES_DECIDERS = {"actuator"}
"""Services besides the decision services that run one leader plus warm standbys (the watcher runs
active-active)."""

CHECKED_ELSEWHERE = {
    "the chart's Deployments, metrics Services and budgets": "tests/unit/deploy/test_chart_render.py",
    "docker-compose.yml's services, users and secrets": "tests/unit/deploy/test_compose_file.py",
    "deploy/nats/*.conf (rendered from corral_bus.permissions)": "tests/unit/bus/test_permissions_table.py",
    "the dashboard's panels per decision service": "tests/unit/deploy/test_alert_metrics.py",
    "what above the libraries may not be imported": "tests/unit/test_layering.py",
}


def services() -> set[str]:
    return set(service_entry_points())


def deciders() -> set[str]:
    return set(decision_services())


def _yaml(relative: str) -> Any:
    return yaml.safe_load((ROOT / relative).read_text())


def _yaml_docs(relative: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((ROOT / relative).read_text()) if d]


def _service_accounts(relative: str) -> set[str]:
    return {
        d["metadata"]["name"].removeprefix("corral-")
        for d in _yaml_docs(relative)
        if d["kind"] == "ServiceAccount"
    }


def _no_leader_alert() -> set[str]:
    text = (ROOT / "deploy/chart/corral/templates/monitoring.yaml").read_text()
    (pattern,) = re.findall(r'corral_service=~"([^"]+)"', text)
    return set(pattern.split("|"))


def _nats_users_helper() -> set[str]:
    helpers = (ROOT / "deploy/chart/corral/templates/_helpers.tpl").read_text()
    return set(helpers.split('define "corral.natsUsers" -}}', 1)[1].split("{{", 1)[0].split())


COMPOSE_INFRASTRUCTURE = {"nats", "bus-init", "sandbox", "demo", "kubeconfig"}


def _compose_services() -> set[str]:
    return set(_yaml("docker-compose.yml")["services"]) - COMPOSE_INFRASTRUCTURE


def _compose_secrets() -> set[str]:
    return {name.removeprefix("nats-") for name in _yaml("docker-compose.yml")["secrets"]}


def _compose_ready_urls() -> set[str]:
    command = _yaml("docker-compose.yml")["services"]["demo"]["command"]
    return {arg.split("//")[1].split(":")[0] for arg in command if arg.startswith("--ready-url=")}


def _member_distributions() -> set[str]:
    return {m.distribution for m in workspace_members()}


def _root_dependencies() -> set[str]:
    return set(root_pyproject()["project"]["dependencies"])


def _root_sources() -> set[str]:
    return set(root_pyproject()["tool"]["uv"]["sources"])


def _mypy_path() -> set[str]:
    return set(root_pyproject()["tool"]["mypy"]["mypy_path"].split(":")) - {"."}


def _member_sources() -> set[str]:
    return {f"{m.where}/src" for m in workspace_members()}


def _service_directories() -> set[str]:
    """The services/ members that run on the bus: all but the admission webhook (no NATS)."""
    return {
        m.directory.name
        for m in workspace_members()
        if m.where.startswith("services/") and m.distribution != WEBHOOK
    }


@dataclass(frozen=True)
class Place:
    """A place outside a service's package that names services, and the names the registry says it
    must hold."""

    where: str
    holds: Callable[[], set[str]]
    must_hold: Callable[[], set[str]]


PLACES = [
    Place("services/*/pyproject.toml `corral.services` entry points", services, _service_directories),
    Place("corral_model.subjects.DECISION_SERVICES", lambda: set(DECISION_SERVICES), deciders),
    Place("corral_bus.permissions.USERS", lambda: set(USERS), lambda: services() | {ADMIN, READER}),
    Place(
        "deploy/chart/corral/templates/_helpers.tpl corral.natsUsers", _nats_users_helper, lambda: set(USERS)
    ),
    Place(
        "deploy/policy/actuator-policy.yaml `services`",
        lambda: set(_yaml("deploy/policy/actuator-policy.yaml")["services"]),
        lambda: services() | {GATE_SERVICE},
    ),
    Place(
        "deploy/rbac/decision-services.yaml ServiceAccounts",
        lambda: _service_accounts("deploy/rbac/decision-services.yaml"),
        deciders,
    ),
    Place(
        "deploy/chart/corral/values.yaml `services`",
        lambda: set(_yaml("deploy/chart/corral/values.yaml")["services"]),
        services,
    ),
    Place(
        "deploy/chart/corral/templates/monitoring.yaml CorralNoLeader `corral_service=~`",
        _no_leader_alert,
        lambda: deciders() | LEADER_ELECTING_BESIDES_DECIDERS,
    ),
    Place("docker-compose.yml `services`", _compose_services, services),
    Place("docker-compose.yml `secrets`", _compose_secrets, lambda: set(USERS)),
    Place("docker-compose.yml demo `--ready-url`s", _compose_ready_urls, services),
    Place("pyproject.toml [project] dependencies", _root_dependencies, _member_distributions),
    Place("pyproject.toml [tool.uv.sources]", _root_sources, _member_distributions),
    Place("pyproject.toml [tool.mypy] mypy_path", _mypy_path, _member_sources),
]


def difference(place: Place, holds: set[str], must_hold: set[str]) -> str:
    """What a place lacks and what it has that the registry does not: "" when they agree."""
    problems = []
    if missing := sorted(must_hold - holds):
        problems.append(f"add {', '.join(missing)}")
    if unknown := sorted(holds - must_hold):
        problems.append(f"remove {', '.join(unknown)} (not in the registry)")
    return f"{place.where}: {'; '.join(problems)}" if problems else ""


@pytest.mark.parametrize("place", PLACES, ids=lambda p: p.where)
def test_each_place_names_exactly_the_registered_services(place: Place) -> None:
    assert difference(place, place.holds(), place.must_hold()) == ""


def test_the_places_checked_elsewhere_are_checked_there() -> None:
    missing = sorted(test for test in CHECKED_ELSEWHERE.values() if not (ROOT / test).is_file())
    assert missing == []


def test_a_service_missing_from_a_place_is_named_with_the_place() -> None:
    """The check can fail, and says where: a new decider registered but not yet in the policy."""
    (policy,) = [place for place in PLACES if place.where.startswith("deploy/policy/")]
    holds = policy.holds()
    message = difference(policy, holds, policy.must_hold() | {"new-decider"})
    assert message == "deploy/policy/actuator-policy.yaml `services`: add new-decider"
    assert "remove new-decider" in difference(policy, holds | {"new-decider"}, policy.must_hold())


CHART_COPIES = ("rbac", "policy", "nats")
"""deploy/<dir>/ files the chart ships as deploy/chart/corral/files/<dir>/ (Helm reads only inside
the chart): the same bytes, so a service added to deploy/ is in the chart too."""


@pytest.mark.parametrize("directory", CHART_COPIES)
def test_the_chart_ships_deploys_files_unchanged(directory: str) -> None:
    copies = sorted((ROOT / "deploy/chart/corral/files" / directory).iterdir())
    assert copies, directory
    stale = [
        copy.relative_to(ROOT).as_posix()
        for copy in copies
        if copy.read_bytes() != (ROOT / "deploy" / directory / copy.name).read_bytes()
    ]
    assert stale == [], f"copy deploy/{directory}/ over these: {stale}"


def test_the_registry_is_not_empty_and_every_decider_is_a_service() -> None:
    assert {"engine-upgrade", "setting-sync", "im-restart", "v2-upgrade"} <= deciders() <= services()
    assert {"watcher", "actuator"} <= services()


def test_the_policy_allows_each_decider_exactly_the_kinds_it_commands() -> None:
    """A decider's `DecisionService.commands` is what the actuator's policy lets it write: a kind it
    commands without a rule would be refused at run time, a rule for a kind it never commands is a
    grant no one needs. Its commands are fenced by its lease term."""
    policy = _yaml("deploy/policy/actuator-policy.yaml")
    common = {rule["kind"] for rule in policy["common"]}
    for name, service in decision_services().items():
        entry = policy["services"][name]
        assert entry.get("fenced") is True, name
        own = {rule["kind"] for rule in entry.get("rules", [])}
        allowed = own | (common if entry.get("common", True) else set())
        assert service.commands <= allowed, (name, sorted(service.commands - allowed))
        assert own - common <= service.commands, (name, sorted(own - common - service.commands))
