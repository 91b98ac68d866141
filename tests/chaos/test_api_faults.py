"""Faults of the Kubernetes API server mid-wave: latency, 409/429/500 answers, watches that end,
and a compaction that sends every re-opened watch a 410 Gone.

One stack (watcher, actuator, two engine-upgrade replicas under the runtime harness in this loop; a
real NATS server; the sandbox) and one wave per fault. The fault is switched on in the emulator once
the wave's first round is patched and off again at the next patch (it held while the loop made
progress through it); the simulator meets the same faults as corral, as Longhorn's controllers would.
Watches that go silent without ending are left out: the simulator notices those only at its 10 s
re-list, which would cost the suite more than the watcher's own 2 s inactivity check shows.
The per-node limit holds at every observation, no volume is patched twice or left out, and at the end
the bus matches the cluster.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from corral_bus import Bus
from tests.chaos.consistency import wait_bus_matches_cluster
from tests.chaos.report import ChaosReport
from tests.chaos.stack import BusSettings, LoopStack
from tests.chaos.waves import Waves, settle
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import Sandbox

pytestmark = [pytest.mark.chaos, pytest.mark.integration]

FAULTS: list[tuple[str, dict[str, Any]]] = [
    ("API latency 0.3 s per request", {"latency_s": 0.3}),
    ("409 Conflict on half the volume writes", {"conflict_rate": 0.5, "plurals": ["volumes"]}),
    ("429 TooManyRequests on half the writes", {"throttle_rate": 0.5, "retry_after_s": 1}),
    ("500 InternalError on a third of the writes", {"error_rate": 0.3}),
    ("every watch ends after 0.5 s", {"watch_cut_after_s": 0.5}),
]


async def test_api_server_faults_mid_wave(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer, chaos_report: ChaosReport
) -> None:
    faults = sandbox.emulator.faults
    stack = LoopStack(str(sandbox.cluster.kubeconfig_path), BusSettings(nats_server.url))
    try:
        await stack.wait_ready()
        waves = Waves(sandbox)
        await waves.prepare()

        async def switch_on(changes: dict[str, Any]) -> None:
            faults.update(changes)

        async def switch_off() -> None:
            faults.reset()

        for name, changes in FAULTS:
            exits = len(stack.exits)
            record = await waves.run(name, functools.partial(switch_on, changes), lift=switch_off)
            chaos_report.add("api", {**record, "service_exits": stack.exits[exits:]})

        async def compact_and_cut() -> None:
            # etcd compacted, then the API server's watches all end: every watcher re-opens from a
            # resourceVersion that is gone, gets 410, and must re-list.
            sandbox.emulator.compact()
            faults.update({"watch_cut_after_events": 1})

        exits = len(stack.exits)
        record = await waves.run("compaction, then every watch cut", compact_and_cut, lift=switch_off)
        chaos_report.add("api", {**record, "service_exits": stack.exits[exits:]})

        await settle(sandbox)
        await wait_bus_matches_cluster(bus, sandbox)
    finally:
        faults.reset()
        await stack.stop()
