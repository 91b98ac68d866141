"""SandboxCluster: the whole sandbox in one process — the Kubernetes API emulator, Longhorn's
webhooks, a seeded Longhorn-like cluster and the simulator playing Longhorn's controllers.

    async with SandboxCluster(seed, sim_config=...) as cluster:
        cluster.kubeconfig_path   # hand this to corral's services / kubernetes-asyncio
        cluster.simulator.faults  # data-plane faults;  cluster.emulator.faults: API faults
        cluster.manager_url       # longhorn-manager's REST API (manual engine upgrade), manager_api.py

From another process both kinds of fault are at `<url>/_sandbox/` (`SandboxControl`, control.py):
the emulator's own endpoints and the simulator's, mounted at `/_sandbox/simulator`.

Start-up order: emulator → webhooks → the seed's base objects through the API → a stepped bootstrap
on a manual clock until quiet → the background simulator (on `clock`, a WallClock by default) →
longhorn-manager's REST API → the public kubeconfig written last and atomically, so whoever waits
for the file finds a finished cluster.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from corral_kube.client import api_client
from corral_sandbox.emulator import Emulator
from corral_sandbox.emulator.kubeconfig import write_kubeconfig
from corral_sandbox.seeds import Seed, apply_seed, bootstrap, default_seed
from corral_sandbox.simulator import Clock, SimConfig, Simulator, WallClock
from corral_sandbox.simulator.admission import LonghornWebhooks
from corral_sandbox.simulator.control import IO_MOUNT, MOUNT, IOControl, SimulatorControl
from corral_sandbox.simulator.kube_admission import install_kube_admission
from corral_sandbox.simulator.manager_api import LonghornManagerAPI
from corral_sandbox.simulator.node_admission import V2DisableWebhook


class SandboxCluster:
    def __init__(
        self,
        seed: Seed | None = None,
        *,
        sim_config: SimConfig | None = None,
        clock: Clock | None = None,
        kubeconfig: str | Path | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        manager_port: int = 0,
        background: bool = True,
        emulator_options: dict[str, Any] | None = None,
        advertise_url: str = "",
    ) -> None:
        """`seed`: the cluster (default: seeds/default.yaml). `sim_config`: the simulator's knobs
        (default: `seed.sim_config()`); its namespace and seed are taken from the seed.
        `background=False` leaves the simulator stepped: drive it with `simulator.step()/settle()`.
        `manager_port`: where longhorn-manager's REST API listens (0 = a free port).
        `advertise_url`: the API server URL the public kubeconfig names, when clients reach it by
        another address than the one it listens on (a container listening on 0.0.0.0, reached by
        its service name); empty: the listening address."""
        self.seed = seed or default_seed()
        config = sim_config or self.seed.sim_config()
        images = {**self.seed.image_profiles, **config.images}
        self.config = dataclasses.replace(
            config, namespace=self.seed.namespace, seed=self.seed.seed, images=images
        )
        self._clock = clock
        self._kubeconfig = Path(kubeconfig) if kubeconfig else None
        self._host, self._port = host, port
        self._advertise_url = advertise_url
        self._manager_port = manager_port
        self._manager: LonghornManagerAPI | None = None
        self._background = background
        self._emulator_options = emulator_options or {}
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._emulator: Emulator | None = None
        self._simulator: Simulator | None = None
        self._api: client.ApiClient | None = None
        self.bootstrap_digest = ""

    @property
    def emulator(self) -> Emulator:
        if self._emulator is None:
            raise RuntimeError("the sandbox is not started")
        return self._emulator

    @property
    def simulator(self) -> Simulator:
        if self._simulator is None:
            raise RuntimeError("the sandbox is not started")
        return self._simulator

    @property
    def kubeconfig_path(self) -> Path:
        if self._kubeconfig is None:
            raise RuntimeError("the sandbox is not started")
        return self._kubeconfig

    @property
    def url(self) -> str:
        return self.emulator.url

    @property
    def manager_url(self) -> str:
        """longhorn-manager's REST API: `POST {manager_url}/v1/volumes/{name}?action=engineUpgrade`."""
        if self._manager is None:
            raise RuntimeError("the sandbox is not started")
        return self._manager.url

    async def start(self) -> SandboxCluster:
        self._tmp = tempfile.TemporaryDirectory(prefix="corral-sandbox-")
        emulator = Emulator(**self._emulator_options)
        self._emulator = emulator
        url = await emulator.start(self._host, self._port)
        LonghornWebhooks(emulator, self.seed.namespace).install(emulator)
        V2DisableWebhook(emulator, self.seed.namespace).install(emulator)
        # the simulator's own kubeconfig: private, so the public one appears only when all is ready
        private = write_kubeconfig(Path(self._tmp.name) / "simulator.kubeconfig", url, self.seed.namespace)
        self._api = await api_client(str(private))
        install_kube_admission(emulator, self.seed.namespace)
        await apply_seed(self._api, self.seed)
        booted = await bootstrap(self._api, self.seed, self.config)
        self.bootstrap_digest = booted.digest()
        self._simulator = Simulator(self._api, self.config, self._clock or WallClock(), rng=booted.rng)
        emulator.mount_control(MOUNT, SimulatorControl(self._simulator))
        emulator.mount_control(IO_MOUNT, IOControl(self._simulator))
        if self._background:
            await self._simulator.start()
        else:
            await self._simulator.sync()
        self._manager = LonghornManagerAPI(self._api, self.seed.namespace)
        await self._manager.start(self._host, self._manager_port)
        if self._kubeconfig is None:
            self._kubeconfig = Path(self._tmp.name) / "kubeconfig"
        write_kubeconfig(self._kubeconfig, self._advertise_url or url, self.seed.namespace)
        return self

    async def stop(self) -> None:
        if self._manager is not None:
            await self._manager.stop()
            self._manager = None
        if self._simulator is not None:
            await self._simulator.stop()
        if self._api is not None:
            await self._api.close()
            self._api = None
        if self._emulator is not None:
            await self._emulator.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def __aenter__(self) -> SandboxCluster:
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
