"""docker-compose.yml is valid Compose (the compose-spec schema, and Compose v2 itself), runs every
corral service from production's image as the chart does, and keeps the sandbox an opt-in profile
on the sandbox image."""

from __future__ import annotations

import json
import subprocess
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from corral_bus.permissions import ADMIN, READER, USERS, env_password_variable
from corral_cli.compose_secrets import SERVER_ENV, write_compose_secrets
from corral_decision.registry import decision_services
from tests.fixtures.compose import ComposeUnavailable, compose_binary
from tests.unit.deploy.manifests import WITH_KUBE, service_entry_points

COMPOSE_FILE = Path(__file__).resolve().parents[3] / "docker-compose.yml"
INFRASTRUCTURE = {"nats", "bus-init", "sandbox", "demo", "kubeconfig"}
DECISION = set(decision_services())


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
    secrets = tmp_path / "nats-secrets"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG_FILE": str(kubeconfig)}
    env["CORRAL_NATS_SECRETS"] = str(secrets)

    def config(profile: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), "-f", str(COMPOSE_FILE), "--profile", profile, "config", "--format", "json"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )

    missing = config("sandbox")  # no passwords yet: refused, saying which file
    assert missing.returncode != 0 and SERVER_ENV in missing.stderr, missing.stderr
    passwords = write_compose_secrets(secrets)
    for profile in ("sandbox", "cluster"):
        done = config(profile)
        assert done.returncode == 0, done.stderr
        services = json.loads(done.stdout)["services"]
        assert {"sandbox", "demo"} <= set(services) if profile == "sandbox" else "kubeconfig" in services
        # nats-server gets every user's password from the env file, by the variable the config reads
        nats_env = services["nats"]["environment"]
        assert nats_env == {env_password_variable(user): passwords[user] for user in USERS}
        # safe beside a real Longhorn unless told otherwise: decision services in mode auto
        for name, service in services.items():
            if name in DECISION:
                assert service["environment"]["CORRAL_MODE"] == "auto", name
            else:
                assert "CORRAL_MODE" not in service.get("environment", {}), name
        assert services["engine-upgrade"]["environment"]["CORRAL_PER_NODE_LIMIT"] == "1"
    env["CORRAL_MODE"] = "replace"  # the sandbox's wave: no longhorn-manager beside it
    assert (
        json.loads(config("sandbox").stdout)["services"]["im-restart"]["environment"]["CORRAL_MODE"]
        == "replace"
    )


def test_no_build_section_and_no_inline_dockerfile() -> None:
    """The image is `make image`'s; Compose v2 of any version runs the file."""
    text = COMPOSE_FILE.read_text()
    assert "dockerfile_inline" not in text
    assert not [name for name, svc in compose()["services"].items() if "build" in svc]


RUNTIME_IMAGE = "${CORRAL_IMAGE:-corral/corral:local}"
SANDBOX_IMAGE = "${CORRAL_SANDBOX_IMAGE:-corral/corral-sandbox:local}"


def test_runs_every_corral_service_from_the_one_image() -> None:
    services = compose()["services"]
    entry_points = service_entry_points()
    assert set(services) - INFRASTRUCTURE == set(entry_points)
    for name, package in entry_points.items():
        service = services[name]
        assert service["image"] == RUNTIME_IMAGE
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


def test_only_the_sandbox_profile_runs_the_sandbox_image() -> None:
    """Production's image has no sandbox (deploy/image/Dockerfile): what needs it, the sandbox
    cluster and the demo, runs from the sandbox image, and nothing else does."""
    services = compose()["services"]
    images = {name: service["image"] for name, service in services.items() if name != "nats"}
    assert {name for name, image in images.items() if image == SANDBOX_IMAGE} == {"sandbox", "demo"}
    assert {name for name, image in images.items() if image == RUNTIME_IMAGE} == set(images) - {
        "sandbox",
        "demo",
    }
    for name in ("sandbox", "demo"):
        assert services[name]["profiles"] == ["sandbox"], name


def _secret_target(service: dict[str, Any]) -> str:
    (secret,) = service["secrets"]
    assert isinstance(secret, str)
    return f"/run/secrets/{secret}"


def test_every_service_connects_as_its_own_user_with_only_its_password() -> None:
    services = compose()["services"]
    for name in service_entry_points():
        service = services[name]
        env = service["environment"]
        assert env["CORRAL_NATS_USER"] == name and name in USERS and name != ADMIN
        assert service["secrets"] == [f"nats-{name}"]
        assert env["CORRAL_NATS_PASSWORD_FILE"] == _secret_target(service)
        assert "CORRAL_NATS_PASSWORD" not in env
        # the setup step has finished before any service starts
        assert service["depends_on"]["bus-init"] == {"condition": "service_completed_successfully"}
    demo = services["demo"]
    assert demo["environment"]["CORRAL_NATS_USER"] == READER and demo["secrets"] == [f"nats-{READER}"]
    declared = compose()["secrets"]
    assert all(declared[s]["file"].endswith("/" + s.removeprefix("nats-")) for s in declared)


def test_nats_runs_the_rendered_configuration_and_bus_init_runs_as_admin() -> None:
    services = compose()["services"]
    nats = services["nats"]
    assert nats["command"] == ["-c", "/etc/nats/nats-server.conf"]
    assert "./deploy/nats/nats-server.conf:/etc/nats/nats-server.conf:ro" in nats["volumes"]
    assert (COMPOSE_FILE.parent / "deploy" / "nats" / "nats-server.conf").is_file()
    # monitoring listens on the container's loopback only: nothing to publish
    assert [p for p in nats["ports"] if p.endswith(":8222")] == []
    init = services["bus-init"]
    assert init["command"][:3] == ["corral", "bus", "init"]
    assert init["environment"] == {
        "CORRAL_NATS_USER": ADMIN,
        "CORRAL_NATS_PASSWORD_FILE": "/run/secrets/nats-admin",
        "CORRAL_HISTORY_MAX_AGE": "${CORRAL_HISTORY_MAX_AGE:-7d}",
        "CORRAL_HISTORY_MAX_BYTES": "${CORRAL_HISTORY_MAX_BYTES:-4Gi}",
    }
    assert init["secrets"] == ["nats-admin"] and "restart" not in init
    admins = [name for name, svc in services.items() if "nats-admin" in svc.get("secrets", [])]
    assert admins == ["bus-init"]


def test_compose_secrets_are_kept_and_private(tmp_path: Path) -> None:
    first = write_compose_secrets(tmp_path / "s")
    (tmp_path / "s" / "watcher").unlink()
    second = write_compose_secrets(tmp_path / "s")
    assert {u: p for u, p in second.items() if u != "watcher"} == {
        u: p for u, p in first.items() if u != "watcher"
    }
    assert second["watcher"] != first["watcher"] and all(p[0].isalpha() for p in second.values())
    assert (tmp_path / "s").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "s" / SERVER_ENV).stat().st_mode & 0o777 == 0o600
