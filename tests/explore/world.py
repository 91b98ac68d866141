"""One cell's world: a fresh sandbox cluster, the contract's streams on the run's NATS server, and
the stack that serves one decision service (watcher, actuator, the deciders), as the scenario suites
build it: the same helpers, the same settings.

The explored decider runs in this event loop, except in a cell whose fault is kill -9: there it is
its own process (tests/chaos/stack.py's `Replica`), since only a real process dies without handing
back its lease or finishing the pass it was in.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

from corral_bus import Bus, connect
from corral_kube.client import api_client
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.control import SandboxControl
from tests.chaos.stack import BusSettings, Replica, settings
from tests.fixtures.nats import NatsServer, recreate_streams, reset_jetstream
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running, decision_replica
from tests.scenarios.engine_upgrade.conftest import actuator, watcher

if TYPE_CHECKING:
    from tests.explore.safety import Safety
    from tests.explore.services import Explored

DECIDER = "explored-1"
"""The explored decider's instance name."""


@dataclass
class World:
    spec: Explored
    sandbox: Sandbox
    control: SandboxControl
    bus: Bus
    nats: NatsServer
    safety: Safety
    services: list[Running] = field(default_factory=list)
    process: Replica | None = None
    """The explored decider when it runs as a process (kill -9 cells)."""
    target: dict[str, str] = field(default_factory=dict)
    """What the state trap caught: `node`, `volume`, `im`, `pod`, `upgrade`… (spec-specific)."""

    @property
    def kubeconfig(self) -> str:
        return str(self.sandbox.cluster.kubeconfig_path)

    async def kill_decider(self) -> None:
        assert self.process is not None, "kill -9 needs the decider as a process"
        self.process.kill()
        assert self.process.process.proc is not None
        await self.process.process.proc.wait()

    async def restart_decider(self) -> None:
        assert self.process is not None
        self.process.process.proc = None
        await self.process.start()


def _process_decider(spec: Explored, kubeconfig: str, url: str, log_dir: Path) -> Replica:
    values: dict[str, Any] = {
        **settings(spec.name, DECIDER, kubeconfig, BusSettings(url)),
        "lease_ttl_s": 1.0,
        **spec.decider_settings,
    }
    values.pop("handover_delay_s", None)
    return Replica(values, log_dir)


async def _process_leads(replica: Replica) -> None:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:

        async def leads() -> bool:
            return await replica.leads(http)

        await eventually(leads, within=120, what=f"{replica.instance} leading", interval=0.05)


@contextlib.asynccontextmanager
async def open_world(spec: Explored, nats: NatsServer, *, as_process: bool = False) -> AsyncIterator[World]:
    """The cell's world, every service leading, the safety hooks in place before anything moves."""
    from tests.explore.safety import Safety

    seed = spec.seed()
    async with SandboxCluster(seed, sim_config=spec.sim_config()) as cluster:
        api = await api_client(str(cluster.kubeconfig_path))
        sandbox = Sandbox(cluster, api, seed.namespace)
        control = SandboxControl.from_kubeconfig(cluster.kubeconfig_path)
        bus = await connect(nats.url, name="explore")
        await reset_jetstream(bus)
        await recreate_streams(bus)
        log_dir = Path(tempfile.mkdtemp(prefix="corral-explore-"))
        world = World(spec, sandbox, control, bus, nats, Safety(sandbox, spec))
        spec.observe(world)
        kubeconfig = str(cluster.kubeconfig_path)
        world.services = [watcher(kubeconfig, nats.url, kinds=spec.kinds), actuator(kubeconfig, nats.url)]
        for index, definition in enumerate(spec.deciders()):
            if index == 0 and as_process:
                continue
            instance = DECIDER if index == 0 else f"helper-{index}"
            extra = spec.decider_settings if index == 0 else {}
            world.services.append(
                decision_replica(definition, nats.url, instance, handover_delay_s=0.0, **extra)
            )
        try:
            if as_process:
                world.process = _process_decider(spec, kubeconfig, nats.url, log_dir)
                await world.process.start()
            await eventually(
                lambda: all(s.ready for s in world.services), within=120, what="the stack to lead"
            )
            if world.process is not None:
                await _process_leads(world.process)
            yield world
        finally:
            if world.process is not None:
                with contextlib.suppress(Exception):
                    await world.process.process.stop()
            for service in reversed(world.services):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(service.stop(), 40)
            with contextlib.suppress(Exception):
                await control.clear()
            await control.close()
            await bus.close()
            await api.close()
