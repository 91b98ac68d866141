"""A sandbox reached by another address than the one it listens on (a container listening on
0.0.0.0, reached by its compose service name) names that address in its kubeconfig."""

from __future__ import annotations

from pathlib import Path

import yaml

from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import default_seed, resized
from corral_sandbox.simulator import ManualClock
from tests.fixtures.sandbox import fast_config


def _server(kubeconfig: Path) -> str:
    server: str = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    return server


async def test_kubeconfig_names_the_advertised_url(tmp_path: Path) -> None:
    seed = resized(default_seed(), nodes=1, volumes=1, rng_seed=1)
    kubeconfig = tmp_path / "kubeconfig"
    async with SandboxCluster(
        seed,
        sim_config=fast_config(),
        clock=ManualClock(),
        background=False,
        kubeconfig=kubeconfig,
        advertise_url="http://sandbox:6443",
    ) as cluster:
        assert _server(kubeconfig) == "http://sandbox:6443"
        assert cluster.emulator.url.startswith("http://127.0.0.1:")  # where it really listens


async def test_kubeconfig_names_the_listening_address_by_default(tmp_path: Path) -> None:
    seed = resized(default_seed(), nodes=1, volumes=1, rng_seed=1)
    kubeconfig = tmp_path / "kubeconfig"
    async with SandboxCluster(
        seed, sim_config=fast_config(), clock=ManualClock(), background=False, kubeconfig=kubeconfig
    ) as cluster:
        assert _server(kubeconfig) == cluster.emulator.url
