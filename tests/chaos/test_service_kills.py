"""kill -9 of each service mid-wave, and a NATS restart, against real processes.

One stack (watcher, actuator, two engine-upgrade replicas, each `python -m corral_<service>`; a real
NATS server; the sandbox) and one wave per fault. A killed watcher or actuator is restarted at once
under its own name, as the kubelet restarts a crashed container in its pod; a killed engine-upgrade
leader is not: its standby takes over, and the time from the kill until the standby's
`corral_leader` gauge says 1 is the decision service's failover (issue 19: within 3 s). Through all of
it the per-node limit holds at every observation, no volume is patched twice and none is left out,
and at the end the bus matches the cluster.
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path

import pytest

from corral_bus import Bus
from tests.chaos.consistency import mismatches, wait_bus_matches_cluster
from tests.chaos.report import ChaosReport
from tests.chaos.stack import BusSettings, ProcessStack, Replica
from tests.chaos.waves import Waves, settle
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox

pytestmark = [pytest.mark.chaos, pytest.mark.integration]


async def test_kill_9_of_each_service_and_a_nats_restart_mid_wave(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer, chaos_report: ChaosReport, tmp_path: Path
) -> None:
    stack = ProcessStack(str(sandbox.cluster.kubeconfig_path), BusSettings(nats_server.url), tmp_path)
    watcher = stack.add("watcher", "w-1")
    actuator = stack.add("actuator", "a-1")
    deciders = [stack.add("engine-upgrade", "eu-1"), stack.add("engine-upgrade", "eu-2")]
    background: list[asyncio.Task[object]] = []
    try:
        await stack.start(watcher, actuator, *deciders)
        await stack.wait_ready(watcher, actuator, *deciders)
        waves = Waves(sandbox)
        await waves.prepare()

        async def kill_and_restart(replica: Replica) -> None:
            replica.kill()
            await stack.restart(replica)

        for replica in (watcher, actuator):
            record = await waves.run(
                f"kill -9 {replica.service}", functools.partial(kill_and_restart, replica)
            )
            chaos_report.add("processes", record)
            await stack.wait_ready(replica)

        leader = await eventually(lambda: stack.leader("engine-upgrade"), what="an engine-upgrade leader")
        standby = next(r for r in deciders if r is not leader)
        failover: list[float] = []

        async def takeover(killed: float) -> None:
            await eventually(
                lambda: standby.leads(stack.http), within=30, what="the standby leading", interval=0.005
            )
            failover.append(time.monotonic() - killed)

        async def kill_leader() -> None:
            leader.kill()
            background.append(asyncio.create_task(takeover(time.monotonic())))

        record = await waves.run("kill -9 engine-upgrade leader", kill_leader)
        await background.pop()
        chaos_report.add("processes", {**record, "failover_s": round(failover[0], 3)})

        async def restart_nats() -> None:
            background.append(asyncio.create_task(asyncio.to_thread(nats_server.restart)))

        try:
            record = await waves.run("restart NATS", restart_nats)
        except AssertionError as e:
            raise AssertionError(f"{e}\nbus vs cluster: {await mismatches(bus, sandbox)}") from None
        await background.pop()
        chaos_report.add("processes", record)

        await settle(sandbox)
        await wait_bus_matches_cluster(bus, sandbox)
    finally:
        for task in background:
            task.cancel()
        await stack.stop()
