"""`corral bus passwords --kube-secret`, the chart's bus-init Job's first step, against the Kubernetes
API emulator: it makes the Secret once, keeps every password on later runs (a GitOps sync or an
upgrade reruns the Job) and adds only a user that is missing."""

from __future__ import annotations

import asyncio
import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from corral_bus.permissions import USERS
from corral_sandbox.emulator import Emulator

NS, NAME = "corral", "corral-nats-users"


def _run(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "corral_cli", "bus", "passwords", "--kube-secret", NAME, "--namespace", NS]
    argv += ["--label", "app.kubernetes.io/instance=corral"]
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )


async def _passwords(api: client.ApiClient) -> dict[str, str]:
    secret = await client.CoreV1Api(api).read_namespaced_secret(NAME, NS)
    return {user: base64.b64decode(value).decode() for user, value in secret.data.items()}


@pytest.mark.integration
async def test_made_once_then_kept_and_completed(emulator: Emulator, kube_api: client.ApiClient) -> None:
    kubeconfig = emulator.kubeconfig_path
    assert kubeconfig is not None
    # the CLI is a child process; the emulator serves from this loop, so wait for it in a thread
    first = await asyncio.to_thread(_run, kubeconfig)
    assert first.returncode == 0, first.stderr
    made = await _passwords(kube_api)
    assert set(made) == set(USERS)
    assert len(set(made.values())) == len(USERS)
    assert all(p[0].isalpha() and len(p) >= 32 for p in made.values())
    secret = await client.CoreV1Api(kube_api).read_namespaced_secret(NAME, NS)
    assert secret.metadata.labels["app.kubernetes.io/instance"] == "corral"

    again = await asyncio.to_thread(_run, kubeconfig)
    assert again.returncode == 0, again.stderr
    assert "made none" in again.stdout
    assert await _passwords(kube_api) == made  # nothing rotated

    # a Secret that lacks a user (an older chart, a hand-made one) gets it, the rest unchanged
    body = [{"op": "remove", "path": "/data/reader"}]
    await client.CoreV1Api(kube_api).patch_namespaced_secret(NAME, NS, body)
    completed = await asyncio.to_thread(_run, kubeconfig)
    assert completed.returncode == 0 and "made reader" in completed.stdout, completed.stdout
    now = await _passwords(kube_api)
    assert {u: p for u, p in now.items() if u != "reader"} == {u: p for u, p in made.items() if u != "reader"}
    assert now["reader"] and now["reader"] != made["reader"]
