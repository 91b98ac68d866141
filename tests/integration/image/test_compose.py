"""`docker compose --profile sandbox up` as an operator runs it, on the images from `make image`
(the services on production's, the sandbox and the demo on the sandbox image):
NATS locked down with corral's users (passwords as `make compose-secrets` writes them), the setup
step as admin, the five services each as its own user, the sandbox cluster and the demo (as
`reader`), each in its own container; the demo starts a Longhorn upgrade through the sandbox's API
and the wave runs to its end, never more than the per-node limit in flight. A small, fast cluster
(8 volumes, 1 s live upgrades) keeps it short."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from corral_cli.compose_secrets import write_compose_secrets
from tests.fixtures.compose import ComposeUnavailable, compose_binary
from tests.fixtures.image import docker
from tests.fixtures.nats import LOCAL_IMAGE

# The first test may build the image (`make image`, minutes on a cold machine) in its setup.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1800)]

COMPOSE_FILE = Path(__file__).resolve().parents[3] / "docker-compose.yml"
# Every published port empty: Docker picks free ones (the machine is shared).
PORTS = [
    "CORRAL_NATS_PORT",
    "CORRAL_WATCHER_PORT",
    "CORRAL_ENGINE_UPGRADE_PORT",
    "CORRAL_SETTING_SYNC_PORT",
    "CORRAL_IM_RESTART_PORT",
    "CORRAL_ACTUATOR_PORT",
    "CORRAL_SANDBOX_PORT",
]


def test_sandbox_profile_runs_one_wave(corral_image: str, corral_sandbox_image: str, tmp_path: Path) -> None:
    try:
        binary = str(compose_binary())
    except ComposeUnavailable as error:
        pytest.fail(str(error))
    nats_image = os.environ.get("CORRAL_NATS_IMAGE") or LOCAL_IMAGE
    secrets = tmp_path / "nats-secrets"
    write_compose_secrets(secrets)
    if docker("image", "inspect", nats_image).returncode != 0:
        pytest.fail(f"NATS image {nats_image} is missing: `make nats-image` builds it")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "CORRAL_IMAGE": corral_image,
        "CORRAL_SANDBOX_IMAGE": corral_sandbox_image,
        "CORRAL_NATS_IMAGE": nats_image,
        "CORRAL_NATS_SECRETS": str(secrets),
        "CORRAL_SANDBOX_VOLUMES": "8",
        "CORRAL_MODE": "replace",  # the sandbox has no longhorn-manager; the demo leaves its limit on
        "CORRAL_SANDBOX_LIVE_UPGRADE_SECONDS": "1",
        "CORRAL_SANDBOX_OFFLINE_UPGRADE_SECONDS": "0.5",
        **dict.fromkeys(PORTS, ""),
    }
    project = ["-p", f"corral-test-{uuid.uuid4().hex[:8]}", "-f", str(COMPOSE_FILE), "--profile", "sandbox"]
    try:
        # Detached, then wait for the demo: `--abort-on-container-exit` would also end the run when
        # the one-shot bus-init finishes.
        started = subprocess.run(
            [binary, *project, "up", "-d"], capture_output=True, text=True, timeout=400, env=env, check=False
        )
        assert started.returncode == 0, started.stdout[-4000:] + started.stderr[-4000:]
        waited = subprocess.run(
            [binary, *project, "wait", "demo"],
            capture_output=True,
            text=True,
            timeout=400,
            env=env,
            check=False,
        )
        done = subprocess.run(
            [binary, *project, "logs", "--no-color"],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
        demo = [
            line.split("|", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("demo-")
        ]
        said = (waited.stdout + waited.stderr).strip()  # "… exited with status code N", or N
        assert waited.returncode == 0 and (said == "0" or said.endswith("status code 0")), (
            "\n".join(demo) + waited.stdout + waited.stderr + done.stdout[-4000:]
        )
        summary = next((line for line in demo if "engine-upgrade wave done" in line), None)
        assert summary, "\n".join(demo)
        assert "5 volumes on longhornio/longhorn-engine:v1.10.1" in summary, summary
        assert "at most 2 in flight on one node (limit 2)" in summary, summary
        assert "corral bus init: streams and lease bucket ready" in done.stdout, done.stdout[-4000:]
    finally:
        subprocess.run(
            [binary, *project, "down", "-v", "--remove-orphans", "--timeout", "5"],
            capture_output=True,
            timeout=120,
            env=env,
            check=False,
        )


def test_cluster_profile_hands_a_private_kubeconfig_to_the_service_user(
    corral_image: str, tmp_path: Path
) -> None:
    """A kubeconfig as people keep it (mode 0600, owned by them) is copied into the `kube` volume
    readable by uid 65532, which the watcher and the actuator run as; the decision services never
    see it."""
    try:
        binary = str(compose_binary())
    except ComposeUnavailable as error:
        pytest.fail(str(error))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    kubeconfig.chmod(0o600)
    secrets = tmp_path / "nats-secrets"
    write_compose_secrets(secrets)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "CORRAL_IMAGE": corral_image,
        "KUBECONFIG_FILE": str(kubeconfig),
        "CORRAL_NATS_SECRETS": str(secrets),
        **dict.fromkeys(PORTS, ""),
    }
    project = ["-p", f"corral-test-{uuid.uuid4().hex[:8]}", "-f", str(COMPOSE_FILE), "--profile", "cluster"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, *project, "run", "--rm", "--no-deps", *args],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
            check=False,
        )

    read = "import os; print(os.getuid(), open('/var/lib/corral/kubeconfig').read().split()[1])"
    try:
        copied = run("kubeconfig")
        assert copied.returncode == 0, copied.stdout + copied.stderr
        watcher = run("--entrypoint", "python", "watcher", "-c", read)
        assert watcher.returncode == 0, watcher.stdout + watcher.stderr
        assert watcher.stdout.split() == ["65532", "v1"], watcher.stdout
        decider = run("--entrypoint", "python", "engine-upgrade", "-c", read)
        assert decider.returncode != 0 and "No such file" in decider.stderr, decider.stdout + decider.stderr
    finally:
        subprocess.run(
            [binary, *project, "down", "-v", "--remove-orphans", "--timeout", "5"],
            capture_output=True,
            timeout=120,
            env=env,
            check=False,
        )
