"""Smoke test of corral's images: the CLI answers, and a service started as it would be in a
Kubernetes pod (uid 65532, read-only root filesystem, only /tmp writable) answers /livez while it
waits for NATS, and says on /readyz what it still waits for. Production's image has no sandbox and
its sandbox commands say which image has it; the sandbox image has the sandbox and its CRDs."""

from __future__ import annotations

import json

import pytest

from corral_cli.sandbox_gate import missing_sandbox
from tests.fixtures.image import DockerContainer, docker
from tests.fixtures.processes import wait_until

# The first test may build the image (`make image`, minutes on a cold machine) in its setup.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

PROBE = (
    "import sys, urllib.request, urllib.error\n"
    "try:\n"
    "    r = urllib.request.urlopen('http://127.0.0.1:8080' + sys.argv[1], timeout=2)\n"
    "    print(r.status, r.read().decode())\n"
    "except urllib.error.HTTPError as e:\n"
    "    print(e.code, e.read().decode())\n"
)


def test_cli_answers(corral_image: str) -> None:
    done = docker("run", "--rm", corral_image, "corral", "--help")
    assert done.returncode == 0, done.stderr
    assert "pre-upgrade" in done.stdout and "plan" in done.stdout
    done = docker("run", "--rm", corral_image, "corral", "pre-upgrade", "--help")
    assert done.returncode == 0, done.stderr
    assert "--target-version" in done.stdout
    done = docker("run", "--rm", corral_image, "corral", "--version")
    assert done.returncode == 0 and done.stdout.startswith("corral "), done.stdout + done.stderr


def test_runs_as_non_root_without_dev_dependencies(corral_image: str) -> None:
    done = docker("run", "--rm", corral_image, "id", "-u")
    assert done.stdout.strip() == "65532"
    done = docker(
        "run", "--rm", corral_image, "python", "-c",
        "import importlib.util as u; print([m for m in ('pytest', 'mypy', 'hypothesis') if u.find_spec(m)])",
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_a_service_answers_livez_on_a_read_only_root(corral_image: str) -> None:
    options = [
        "--read-only", "--tmpfs", "/tmp", "--user", "65532:65532", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        # a NATS that does not answer: the service is alive, and not ready
        "-e", "CORRAL_NATS_URL=nats://127.0.0.1:1", "-e", "CORRAL_HEALTH_PORT=8080",
    ]  # fmt: skip
    with DockerContainer(corral_image, ["python", "-m", "corral_engine_upgrade"], options=options) as service:

        def livez() -> str | None:
            assert service.running(), service.logs()
            done = service.exec("python", "-c", PROBE, "/livez")
            return done.stdout if done.stdout.startswith("200") else None

        wait_until(livez, within=60, what="/livez of engine-upgrade in the container")
        readyz = service.exec("python", "-c", PROBE, "/readyz").stdout
        status, _, body = readyz.partition(" ")
        assert status == "503", readyz
        assert "nats" in json.dumps(body), readyz


def test_production_image_has_no_sandbox_and_says_where_it_is(corral_image: str) -> None:
    done = docker("run", "--rm", corral_image, "python", "-c", "import corral_sandbox")
    assert done.returncode != 0 and "No module named 'corral_sandbox'" in done.stderr, (
        done.stdout + done.stderr
    )
    done = docker("run", "--rm", corral_image, "test", "-e", "/opt/corral/deploy/crds")
    assert done.returncode == 1, done.stdout + done.stderr  # the sandbox's CRDs stay out too
    for command, argv in (
        ("demo", ["demo", "engine-upgrade", "--kubeconfig", "/var/lib/corral/kubeconfig"]),
        ("sandbox up", ["sandbox", "up", "--demo"]),
        ("sandbox fault", ["sandbox", "fault", "show"]),
        ("run", ["run"]),
    ):
        done = docker("run", "--rm", corral_image, "corral", *argv)
        assert done.returncode == 2, (argv, done.stdout, done.stderr)
        assert done.stderr.splitlines() == [missing_sandbox(command)], (argv, done.stderr)


def test_sandbox_image_has_the_sandbox_and_its_crds(corral_sandbox_image: str) -> None:
    find = (
        "import corral_sandbox.cluster\n"
        "from corral_sandbox.emulator.crds import default_crd_dir, read_crds\n"
        "print(default_crd_dir(), len(list(read_crds(default_crd_dir()))))\n"
    )
    done = docker("run", "--rm", corral_sandbox_image, "python", "-c", find)
    assert done.returncode == 0, done.stdout + done.stderr
    where, count = done.stdout.split()
    assert where == "/opt/corral/deploy/crds" and int(count) > 0, done.stdout
    done = docker("run", "--rm", corral_sandbox_image, "corral", "sandbox", "up", "--help")
    assert done.returncode == 0 and "--advertise-url" in done.stdout, done.stdout + done.stderr
    done = docker("run", "--rm", corral_sandbox_image, "id", "-u")
    assert done.stdout.strip() == "65532"
