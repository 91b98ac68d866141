"""`corral run` drives the sandbox, which has no longhorn-manager: its decision services run in mode
replace, said explicitly, since a deployment's default is auto; an operator's CORRAL_MODE wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral_cli.commands.run import RunPlan, service_components, service_packages
from corral_decision.registry import decision_services


def _modes(tmp_path: Path) -> dict[str, str | None]:
    plan = RunPlan(repo=tmp_path, run_dir=tmp_path, nats_url="nats://127.0.0.1:4222")
    components = service_components(plan, service_packages(None), health_base_port=20000)
    return {c.name: c.env.get("CORRAL_MODE") for c in components}


def test_decision_services_run_in_mode_replace_and_the_others_get_no_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CORRAL_MODE", raising=False)
    modes = _modes(tmp_path)
    deciders = set(decision_services())
    assert deciders and {name for name, mode in modes.items() if mode == "replace"} == deciders
    assert modes["watcher"] is None and modes["actuator"] is None


def test_the_operators_mode_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_MODE", "auto")
    assert {mode for name, mode in _modes(tmp_path).items() if name in decision_services()} == {"auto"}
