"""NATS cluster faults mid-wave: corral on a 3-server JetStream cluster with R3 streams and lease
bucket (issue 19 part 5), as it runs when one NATS server is not enough (docs/nats-cluster.md).

One stack (watcher, actuator, two engine-upgrade replicas in this loop, each connected to the
cluster's three URLs, pinging every second so a frozen server is left within about 3 s) and one wave
per fault:

* kill -9 of the server leading engine-upgrade's command stream, restarted at the next patch;
* once it is back and current, kill -9 of another server (the lease bucket's leader, or else any
  other), restarted likewise;
* a partition of that stream's leader: its server frozen with SIGSTOP (its peers and clients see
  it stop answering, its connections stay open), thawed at the next patch.

Besides the invariants of every wave (per-node limit at every observation, no volume patched twice
or left out) a probe publishes to an R3 stream of its own all along, and every message the cluster
acknowledged must be there after each fault; the actuator's LH_RESULTS must hold one `applied` per
volume and wave (no result lost, none doubled); and after the kills and after the partition the bus
matches the cluster: every object's last message on LH_OBJECTS is its current state, even though
the frozen server stores the watcher's frames late (they are refused: docs/nats-cluster.md).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import pytest
from nats.js.api import StreamConfig
from nats.js.errors import ServiceUnavailableError

from corral_bus import Bus, StreamSettings, connect, ensure_streams
from corral_bus.lease import LEASE_BUCKET
from corral_model.envelopes import Outcome
from corral_model.subjects import OBJECTS_STREAM, command_stream
from tests.chaos.consistency import overtaken, wait_bus_matches_cluster
from tests.chaos.report import ChaosReport
from tests.chaos.stack import BusSettings, LoopStack
from tests.chaos.waves import Waves, settle
from tests.fixtures.nats import reset_jetstream
from tests.fixtures.nats_cluster import ClusterServer, NatsCluster
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox
from tests.integration.actuator.harness import results

pytestmark = [pytest.mark.chaos, pytest.mark.integration]
WAVE_COMMANDS = command_stream("engine-upgrade")

PROBE_STREAM = "CHAOS_PROBE"


class Probe:
    """Publishes numbered messages to an R3 stream for as long as it runs, and keeps what the
    cluster acknowledged (sequence → payload): those must all be stored, whatever failed since."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.acked: dict[int, bytes] = {}
        self.sent = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.bus.js.add_stream(
            StreamConfig(name=PROBE_STREAM, subjects=["chaos.probe"], num_replicas=3)
        )
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            payload = f"probe {self.sent}".encode()
            self.sent += 1
            try:
                ack = await self.bus.js.publish("chaos.probe", payload, timeout=1.0)
                self.acked[ack.seq] = payload
            except Exception:  # no leader, or our server gone: not acknowledged, so not promised
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.02)

    async def lost(self) -> list[int]:
        """The acknowledged messages the stream does not hold (as acknowledged) now."""
        missing = []
        for seq, payload in sorted(self.acked.items()):
            try:
                stored = await self.bus.js.get_msg(PROBE_STREAM, seq)
            except Exception:
                missing.append(seq)
                continue
            if stored.data != payload:
                missing.append(seq)
        return missing

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def leader_of(bus: Bus, cluster: NatsCluster, stream: str) -> ClusterServer:
    async def named() -> str | None:
        try:
            info = await bus.js.stream_info(stream)
        except Exception:
            return None
        return info.cluster.leader if info.cluster is not None else None

    return cluster.server(await eventually(named, within=30, what=f"{stream}'s leader"))


async def test_nats_cluster_faults_mid_wave(
    sandbox: Sandbox, nats_cluster: NatsCluster, chaos_report: ChaosReport
) -> None:
    bus = await connect(nats_cluster.url, "chaos-test", ping_interval=1.0)
    await reset_jetstream(bus)
    await ensure_streams(bus.js, StreamSettings(replicas=3))
    settings = BusSettings(nats_cluster.url, replicas=3, ping_interval_s=1.0)
    stack = LoopStack(str(sandbox.cluster.kubeconfig_path), settings)
    probe = Probe(bus)
    background: list[asyncio.Task[None]] = []

    async def back_up(server: ClusterServer) -> None:
        """Restart (or thaw) `server` without holding up the wave's observations."""
        action = server.thaw if server.frozen else server.start
        background.append(asyncio.create_task(asyncio.to_thread(action)))

    async def healthy_again() -> None:
        while background:
            await background.pop()
        await asyncio.to_thread(nats_cluster.wait_healthy)

    try:
        await stack.wait_ready()
        await probe.start()
        waves = Waves(sandbox)
        await waves.prepare()

        exits = [0]

        async def record(name: str, result: dict[str, object], server: ClusterServer) -> None:
            await healthy_again()
            lost = await probe.lost()
            chaos_report.add(
                "nats-cluster",
                {
                    **result,
                    "server": server.name,
                    "acked_probe_messages": len(probe.acked),
                    "lost_acked_messages": len(lost),
                    "service_exits": stack.exits[exits[0] :],
                },
            )
            exits[0] = len(stack.exits)
            assert not lost, f"{name}: acknowledged messages lost: {lost[:20]}"

        first = await leader_of(bus, nats_cluster, WAVE_COMMANDS)

        async def kill_first() -> None:
            first.kill()

        result = await waves.run(
            f"kill -9 NATS server leading {WAVE_COMMANDS}", kill_first, lift=lambda: back_up(first)
        )
        await record("first kill", result, first)

        second = await leader_of(bus, nats_cluster, f"KV_{LEASE_BUCKET}")
        if second is first:
            second = next(s for s in nats_cluster.servers if s is not first)

        async def kill_second() -> None:
            second.kill()

        result = await waves.run(
            "kill -9 another NATS server after the first returned", kill_second, lift=lambda: back_up(second)
        )
        await record("second kill", result, second)
        await settle(sandbox)
        await wait_bus_matches_cluster(bus, sandbox)

        partitioned = await leader_of(bus, nats_cluster, WAVE_COMMANDS)

        async def partition() -> None:
            partitioned.freeze()

        result = await waves.run(
            f"partition (SIGSTOP) of {WAVE_COMMANDS}'s leader", partition, lift=lambda: back_up(partitioned)
        )
        await record("partition", result, partitioned)

        await settle(sandbox)
        objects = (await bus.js.stream_info(OBJECTS_STREAM)).state
        footprint = chaos_report.footprint
        footprint["lh_objects_bytes_per_message"] = round(objects.bytes / max(1, objects.messages))
        footprint["lh_objects_messages_per_volume"] = round(objects.messages / len(waves.names), 1)
        patched = Counter(c.volume for c in waves.ledger.changes)
        applied: Counter[str] = Counter()

        async def every_write_reported() -> bool:
            """Each write has its one APPLIED result on LH_RESULTS (an actuator that wrote while the
            cluster elected a leader publishes the result once the stream takes it again)."""
            nonlocal applied
            try:
                recorded = await results(bus)
            except ServiceUnavailableError:  # the stream's group still electing after the thaw
                return False
            applied = Counter(
                r.target.name
                for r in recorded
                # the volume patches only: engine-upgrade's Volume Events are reports, not writes
                if r.service == "engine-upgrade"
                and r.outcome == Outcome.APPLIED
                and r.target.kind == "Volume"
            )
            return applied == patched

        with contextlib.suppress(AssertionError):
            await eventually(every_write_reported, within=30, what="every write's result")
        assert applied == patched, f"LH_RESULTS' applied per volume {applied} != writes {patched}"
        try:
            await wait_bus_matches_cluster(bus, sandbox, within=10)
            stale: list[str] = []
            missing: list[str] = []
        except AssertionError:
            stale, missing = await overtaken(bus, sandbox)
        chaos_report.faults[-1]["bus_stale_objects"] = len(stale)
        chaos_report.faults[-1]["bus_missing_objects"] = len(missing)
        assert not missing, f"after the partition, current states never stored on LH_OBJECTS: {missing}"
        # Frames the watcher had sent to the frozen server are processed when it thaws, after the
        # watcher stored newer states elsewhere: the expected last subject sequence each event
        # carries has the stream refuse them (docs/nats-cluster.md, "Late frames").
        assert not stale, f"after the partition an older event overtook the current one: {stale}"
    finally:
        await probe.stop()
        for task in background:
            with contextlib.suppress(Exception):
                await task
        await stack.stop()
        await bus.close()
