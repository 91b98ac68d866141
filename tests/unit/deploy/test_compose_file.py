"""docker-compose.yml is valid Compose (the compose-spec schema, and Compose v2 itself), runs every
corral service from the one image as the chart does, and keeps the sandbox an opt-in profile."""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.fixtures.compose import ComposeUnavailable, compose_binary
from tests.unit.deploy.manifests import WITH_KUBE, service_entry_points

COMPOSE_FILE = Path(__file__).resolve().parents[3] / "docker-compose.yml"
INFRASTRUCTURE = {"nats", "sandbox", "demo", "kubeconfig"}


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(COMPOSE_FILE.read_text())
    return loaded


def compose_spec() -> dict[str, Any]:
    """The compose-spec JSON schema, as check-jsonschema vendors it."""
    vendored = resources.files("check_jsonschema.builtin_schemas.vendor")
    text = vendored.joinpath("compose-spec.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def test_valid_against_the_compose_spec() -> None:
    jsonschema.validate(compose(), compose_spec())


def test_the_schema_check_can_fail() -> None:
    broken = compose()
    broken["services"]["watcher"]["restart_policy"] = "always"  # not a service key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, compose_spec())


def test_compose_v2_accepts_it_with_each_profile(tmp_path: Path) -> None:
    try:
        binary = compose_binary()
    except ComposeUnavailable as error:
        pytest.fail(str(error))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    for profile in ("sandbox", "cluster"):
        done = subprocess.run(
            [str(binary), "-f", str(COMPOSE_FILE), "--profile", profile, "config", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG_FILE": str(kubeconfig)},
        )
        assert done.returncode == 0, done.stderr
        services = json.loads(done.stdout)["services"]
        assert {"sandbox", "demo"} <= set(services) if profile == "sandbox" else "kubeconfig" in services


def test_no_build_section_and_no_inline_dockerfile() -> None:
    """The image is `make image`'s; Compose v2 of any version runs the file."""
    text = COMPOSE_FILE.read_text()
    assert "dockerfile_inline" not in text
    assert not [name for name, svc in compose()["services"].items() if "build" in svc]


def test_runs_every_corral_service_from_the_one_image() -> None:
    services = compose()["services"]
    entry_points = service_entry_points()
    assert set(services) - INFRASTRUCTURE == set(entry_points)
    for name, package in entry_points.items():
        service = services[name]
        assert service["image"] == "${CORRAL_IMAGE:-corral/corral:local}"
        assert service["command"] == ["python", "-m", package]
        assert service["user"] == "65532:65532" and service["read_only"] is True
        volumes = service.get("volumes", [])
        if name in WITH_KUBE:
            assert service["environment"]["CORRAL_KUBECONFIG"] == "/var/lib/corral/kubeconfig"
            assert volumes == ["kube:/var/lib/corral:ro"]
        else:  # a decision service holds no credentials
            assert "CORRAL_KUBECONFIG" not in service["environment"]
            assert not volumes


def test_the_sandbox_and_the_cluster_kubeconfig_are_opt_in_profiles() -> None:
    services = compose()["services"]
    assert services["sandbox"]["profiles"] == ["sandbox"]
    assert services["demo"]["profiles"] == ["sandbox"]
    assert services["kubeconfig"]["profiles"] == ["cluster"]
    assert "--advertise-url=http://sandbox:6443" in services["sandbox"]["command"]
    ready = {arg.split("//")[1].split(":")[0] for arg in services["demo"]["command"] if "--ready-url" in arg}
    assert ready == set(service_entry_points())
