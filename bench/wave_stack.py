"""The corral services a bench runs through (watcher, actuator and one decider: engine-upgrade for
the wave bench, v2-upgrade for the v2 upgrade bench): each in its own process, as deployed, or all
in the bench's event loop, as the scenario tests run them.

Where they run changes what a slot's idle time measures. In the bench's loop, every hop of every
service waits behind the sandbox (the API emulator and the simulated Longhorn controllers), which
spends most of that loop's CPU during a wave (cProfile of a wave: the sandbox's own modules about a
third of the loop's busy time, more with the copying, JSON and HTTP serving they call; corral's
services' own modules and the bus library about 3 %): much of the wait measured is the sandbox's,
not corral's. Deployed, the watcher, engine-upgrade and the actuator are processes of
their own, and the API server and Longhorn's controllers are somebody else's processes, so
`processes` (the default of bench_wave.py) is the honest shape and `in-loop` the comparison.

Each process gets the deployed configuration (`python -m corral_<service>` with `CORRAL_*`
variables) except: the kinds the watcher lists are the decider's, the actuator has no rate
limit (`CORRAL_QPS=0`, as the scenario stack's), the decider decides at the given debounce with
its `Decider.settings` (each a `CORRAL_<NAME>` variable in a process), and
the upgrade-path gate is off (the sandbox's images have no release history). In the loop, the
scenario stack's actuator reads the Settings its policy checks on every command (`settings_ttl_s`
0, so a test sees a change at once); here it keeps them for the deployed `settings_ttl_s`, as the
process does: the GET per command took half the way from the command to its patch (p50 24
of the 46 ms from `createdAt` to the PATCH sent, at load 7; 0.1 ms with the deployed cache).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import msgspec

from bench.bench_pipeline import Service
from bench.bench_sandbox import cpu_s
from corral_actuator.config import ActuatorConfig
from corral_decision.service import DecisionService
from corral_engine_upgrade.service import DEFINITION as ENGINE_UPGRADE_DEFINITION
from corral_v2_upgrade.core import READS as V2_UPGRADE_READS
from corral_v2_upgrade.service import DEFINITION as V2_UPGRADE_DEFINITION
from tests.fixtures.processes import eventually
from tests.fixtures.services import decision_replica
from tests.scenarios.engine_upgrade.conftest import ENGINE_UPGRADE_KINDS, actuator, watcher

PROCESSES, IN_LOOP = "processes", "in-loop"
DEPLOYED_SETTINGS_TTL_S = ActuatorConfig().settings_ttl_s
READY_WITHIN_S = 180.0  # generous: the machine is shared, and three services import and connect at once


def deployed_debounce_s(definition: DecisionService[Any]) -> float:
    """The decision service's debounce as deployed: its configuration's default, not the tests'."""
    default = next(f.default for f in msgspec.structs.fields(definition.config) if f.name == "debounce_s")
    return float(default)


def add_stack_options(parser: argparse.ArgumentParser, definition: DecisionService[Any]) -> None:
    """The options every bench on this stack takes: the decider's debounce (deployed by default) and
    where the services run."""
    parser.add_argument("--debounce-s", type=float, default=deployed_debounce_s(definition))
    parser.add_argument(
        "--services",
        choices=(PROCESSES, IN_LOOP),
        default=PROCESSES,
        help="each service its own process, as deployed (default), or all in the bench's event loop",
    )


@dataclasses.dataclass(frozen=True)
class Decider:
    """The decision service a bench drives: its kit definition, its package (`python -m`), the
    kinds the watcher must publish for it, and the settings it runs with beside the debounce."""

    definition: DecisionService[Any]
    package: str
    instance: str
    kinds: tuple[str, ...]
    settings: Mapping[str, float | int | bool | str] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.definition.name

    def environment(self, debounce_s: float) -> dict[str, str]:
        """The `CORRAL_*` variables of its process: instance, debounce and settings."""
        settings = {"instance": self.instance, **self.settings, "debounce_s": debounce_s}
        return {f"CORRAL_{name.upper()}": _variable(value) for name, value in settings.items()}


def _variable(value: float | int | bool | str) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


ENGINE_UPGRADE = Decider(ENGINE_UPGRADE_DEFINITION, "corral_engine_upgrade", "eu-1", ENGINE_UPGRADE_KINDS)


def v2_upgrade(**settings: float | int | bool | str) -> Decider:
    """v2-upgrade, the watcher publishing every kind it reads, with `settings` (node_timeout_s…)."""
    return Decider(
        V2_UPGRADE_DEFINITION, "corral_v2_upgrade", "v2u-1", tuple(sorted(V2_UPGRADE_READS)), settings
    )


class Stack(Protocol):
    def cpu_s(self) -> dict[str, float]:
        """CPU seconds so far of each service that runs in a process of its own."""
        ...


async def _leads(service: Service, session: aiohttp.ClientSession) -> bool:
    """The decider's `corral_leader` gauge says it leads (it decides only then)."""
    try:
        async with session.get(f"http://127.0.0.1:{service.port}/metrics") as response:
            text = await response.text()
    except aiohttp.ClientError:
        return False
    return any(line.split()[1:] == ["1.0"] for line in text.splitlines() if line.startswith("corral_leader "))


class _InLoop:
    def cpu_s(self) -> dict[str, float]:
        return {}


class _Processes:
    def __init__(self, services: list[Service]) -> None:
        self.services = services

    def cpu_s(self) -> dict[str, float]:
        return {s.name: cpu_s(s.pid) for s in self.services}


@contextlib.asynccontextmanager
async def running(
    where: str,
    kubeconfig: str,
    nats_url: str,
    debounce_s: float,
    workdir: Path,
    decider: Decider = ENGINE_UPGRADE,
) -> AsyncIterator[Stack]:
    """watcher, actuator and the decider (leading), ready, `where` says how; stopped after."""
    if where == IN_LOOP:
        settings: dict[str, Any] = {**decider.settings, "debounce_s": debounce_s}
        in_loop = [
            watcher(kubeconfig, nats_url, kinds=decider.kinds),
            actuator(kubeconfig, nats_url, settings_ttl_s=DEPLOYED_SETTINGS_TTL_S),
            decision_replica(
                decider.definition,
                nats_url,
                decider.instance,
                handover_delay_s=0.0,
                **settings,
            ),
        ]
        try:
            await eventually(lambda: all(s.ready for s in in_loop), within=READY_WITHIN_S, what="the stack")
            yield _InLoop()
        finally:
            for running_here in reversed(in_loop):
                await running_here.stop()
        return
    if where != PROCESSES:
        raise ValueError(f"services run as {PROCESSES!r} or {IN_LOOP!r}, not {where!r}")
    common = {"CORRAL_NATS_URL": nats_url}
    kube = {**common, "CORRAL_KUBECONFIG": kubeconfig}
    services = [
        Service(
            "watcher",
            "corral_watcher",
            {**kube, "CORRAL_INSTANCE": "w-1", "CORRAL_KINDS": ",".join(decider.kinds)},
            workdir,
        ),
        Service(
            "actuator", "corral_actuator", {**kube, "CORRAL_INSTANCE": "a-1", "CORRAL_QPS": "0"}, workdir
        ),
        Service(decider.name, decider.package, {**common, **decider.environment(debounce_s)}, workdir),
    ]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        try:
            for service in services:
                await service.process.start()
            for service in services:
                await eventually(
                    functools.partial(service.ready, session),
                    within=READY_WITHIN_S,
                    what=f"{service.name} ready",
                )
            deciding = services[-1]
            await eventually(
                functools.partial(_leads, deciding, session), within=READY_WITHIN_S, what="a leader"
            )
            yield _Processes(services)
        finally:
            for service in reversed(services):
                await service.process.stop()
