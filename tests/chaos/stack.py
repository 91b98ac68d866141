"""The services a chaos test runs against the sandbox: watcher, actuator and two engine-upgrade
replicas, described once (`settings`) and run either as real processes (`ProcessStack`: what kill -9
needs) or under the runtime harness in the test's own loop (`LoopStack`: cheaper, for faults of the
API server and of NATS, which the services only meet from outside).

Settings are the chaos suite's: a fast watcher (a silent watch is re-opened after 2 s), an
actuator that redelivers an unacknowledged command after 2 s, no upgrade-path gate (the sandbox's
images carry no versions worth gating); processes keep each service's default lease (2.5 s for
engine-upgrade, whose failover is measured), in-loop replicas the fixtures' 2 s. Set
`CORRAL_CHAOS_LOG_LEVEL=info` to see in the services' logs what a fault did.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from corral_actuator.config import ActuatorConfig
from corral_actuator.runner import main as actuator_main
from corral_engine_upgrade.service import DEFINITION
from corral_watcher.config import WatcherConfig
from corral_watcher.runner import main as watcher_main
from tests.fixtures.processes import ServiceProcess, eventually, free_port, python_module
from tests.fixtures.services import IN_LOOP, Running, decision_replica

POLICY_FILE = Path(__file__).resolve().parents[2] / "deploy" / "policy" / "actuator-policy.yaml"
WATCHED = ["volume", "replica", "engineimage", "node", "setting"]
MODULES = {
    "watcher": "corral_watcher",
    "actuator": "corral_actuator",
    "engine-upgrade": "corral_engine_upgrade",
    "v2-upgrade": "corral_v2_upgrade",
    "im-restart": "corral_im_restart",
    "setting-sync": "corral_setting_sync",
}


@dataclass(frozen=True)
class BusSettings:
    """Where the services find NATS: the URL (a cluster's servers comma-separated), the copies of
    each stream, and how soon a client leaves a server that stopped answering."""

    url: str
    replicas: int = 1
    ping_interval_s: float = 10.0


def settings(service: str, instance: str, kubeconfig: str, bus: BusSettings) -> dict[str, Any]:
    """Every setting of one service replica, as field names of its configuration."""
    common: dict[str, Any] = {
        "service": service,
        "instance": instance,
        "nats_url": bus.url,
        "nats_replicas": bus.replicas,
        "nats_ping_interval_s": bus.ping_interval_s,
        "health_host": "127.0.0.1",
        "log_level": os.environ.get("CORRAL_CHAOS_LOG_LEVEL", "warning"),
        "upgrade_gate": False,
        "shutdown_grace_s": 5.0,
    }
    if service == "watcher":
        return {**common, "kubeconfig": kubeconfig, "kinds": WATCHED, "inactivity_timeout_s": 2.0}
    if service == "actuator":
        return {
            **common,
            "kubeconfig": kubeconfig,
            "policy_path": str(POLICY_FILE),
            "qps": 0.0,
            "ack_wait_s": 2.0,
            "audit_log": False,
            "settings_ttl_s": 0.0,
        }
    return {**common, "debounce_s": 0.01}


def environment(values: dict[str, Any]) -> dict[str, str]:
    """The same settings as `CORRAL_*` variables, as a Deployment would set them."""
    env: dict[str, str] = {}
    for name, value in values.items():
        if isinstance(value, list):
            text = ",".join(value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[f"CORRAL_{name.upper()}"] = text
    return env


class Replica:
    """One service replica as its own process (`python -m corral_<service>`), with its health port."""

    def __init__(self, values: dict[str, Any], log_dir: Path) -> None:
        self.service = str(values["service"])
        self.instance = str(values["instance"])
        self.port = free_port()
        env = environment({**values, "health_port": self.port})
        self.process = ServiceProcess(self.instance, python_module(MODULES[self.service]), env, log_dir)

    async def start(self) -> None:
        await self.process.start()

    def kill(self) -> None:
        """SIGKILL: no lease released, no in-flight work finished, nothing flushed."""
        assert self.process.proc is not None
        self.process.proc.kill()

    async def _get(self, session: aiohttp.ClientSession, path: str) -> tuple[int, str] | None:
        if not self.process.running:
            raise AssertionError(f"{self.instance} exited:\n{self.process.output()[-3000:]}")
        try:
            async with session.get(f"http://127.0.0.1:{self.port}{path}") as response:
                return response.status, await response.text()
        except (aiohttp.ClientError, TimeoutError):
            return None

    async def ready(self, session: aiohttp.ClientSession) -> bool:
        answer = await self._get(session, "/readyz")
        return answer is not None and answer[0] == 200

    async def leads(self, session: aiohttp.ClientSession) -> bool:
        """Its `corral_leader` gauge is 1."""
        answer = await self._get(session, "/metrics")
        if answer is None:
            return False
        return any(
            line.startswith("corral_leader ") and line.endswith(" 1.0") for line in answer[1].splitlines()
        )


@dataclass
class ProcessStack:
    """watcher, actuator and engine-upgrade replicas as processes; kill and restart any of them."""

    kubeconfig: str
    bus: BusSettings
    log_dir: Path
    replicas: dict[str, Replica] = field(default_factory=dict)
    session: aiohttp.ClientSession | None = None
    started: int = 0

    def add(self, service: str, instance: str) -> Replica:
        replica = Replica(settings(service, instance, self.kubeconfig, self.bus), self.log_dir)
        self.replicas[instance] = replica
        return replica

    @property
    def http(self) -> aiohttp.ClientSession:
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1))
        return self.session

    async def start(self, *replicas: Replica) -> None:
        for replica in replicas:
            await replica.start()
            self.started += 1

    async def wait_ready(self, *replicas: Replica, within: float = 120.0) -> None:
        """Until each answers /readyz (a standby does too, once its view is warm)."""

        async def all_ready() -> bool:
            return all([await r.ready(self.http) for r in replicas])

        await eventually(all_ready, within=within, what="the replicas ready", interval=0.05)

    async def leader(self, service: str) -> Replica | None:
        for replica in self.replicas.values():
            if replica.service == service and replica.process.running and await replica.leads(self.http):
                return replica
        return None

    async def restart(self, replica: Replica) -> Replica:
        """A killed replica's container restarted in the same pod: same instance name, new process."""
        await replica.process.kill()
        replica.process.proc = None
        await self.start(replica)
        return replica

    async def stop(self) -> None:
        for replica in self.replicas.values():
            with contextlib.suppress(Exception):
                await replica.process.stop()
        if self.session is not None:
            await self.session.close()


def in_loop(service: str, instance: str, kubeconfig: str, bus: BusSettings) -> Running:
    """One replica under the runtime harness in this event loop (health on a free port)."""
    values = {**IN_LOOP, **settings(service, instance, kubeconfig, bus), "health_port": 0}
    if service == "watcher":
        return Running(instance, msgspec.convert(values, WatcherConfig), watcher_main, [])
    if service == "actuator":
        return Running(instance, msgspec.convert(values, ActuatorConfig), actuator_main, ["policy"])
    values = {k: v for k, v in values.items() if k not in ("service", "instance", "nats_url")}
    return decision_replica(DEFINITION, bus.url, instance, **values)


class LoopStack:
    """watcher, actuator and two engine-upgrade replicas in this event loop.

    Like the kubelet with a crashed container, `supervise` starts a replica again when its service
    exited (a service exits with status 1 when its main fails); every exit is kept in `exits`, with
    its status, for chaos.json: a restart is no breach, but it must be visible."""

    def __init__(self, kubeconfig: str, bus: BusSettings) -> None:
        self.kubeconfig = kubeconfig
        self.bus = bus
        self.replicas = [
            ("watcher", "w-1"),
            ("actuator", "a-1"),
            ("engine-upgrade", "eu-1"),
            ("engine-upgrade", "eu-2"),
        ]
        self.services = [in_loop(service, instance, kubeconfig, bus) for service, instance in self.replicas]
        self.exits: list[str] = []
        self._supervisor: asyncio.Task[None] | None = None

    async def wait_ready(self) -> None:
        """Until every replica is bootstrapped and one of each service leads."""

        def ready() -> bool:
            leading = {s.ctx.name for s in self.services if s.ready and s.ctx is not None}
            return all(s.bootstrapped for s in self.services) and leading == {
                "watcher",
                "actuator",
                "engine-upgrade",
            }

        await eventually(ready, within=120, what="the stack ready and led")
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise())

    async def _supervise(self) -> None:
        while True:
            for index, running in enumerate(self.services):
                if running.task.done():
                    status = running.task.exception() or running.task.result()
                    service, instance = self.replicas[index]
                    self.exits.append(f"{instance}: exited ({status!r})")
                    self.services[index] = in_loop(service, instance, self.kubeconfig, self.bus)
            await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        for service in reversed(self.services):
            await service.stop()
