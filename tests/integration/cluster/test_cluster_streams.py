"""The bus on a 3-server NATS cluster: R3 streams and lease bucket, never lowered by a service
started with the single-server default, and acknowledged publishes survive their stream leader's
death (what the chaos suite's cluster faults rely on)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from corral_bus import Bus, StreamSettings, connect, ensure_streams
from corral_bus.lease import open_bucket
from corral_model import subjects
from tests.fixtures.nats import reset_jetstream
from tests.fixtures.nats_cluster import NatsCluster
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration


async def _publish(bus: Bus, index: int) -> int | None:
    """The stream sequence of an acknowledged publish; None while no leader acknowledges."""
    try:
        return (await bus.js.publish(f"lh.obj.volume.ns.v{index}", b"{}", timeout=2)).seq
    except Exception:
        return None


def _publisher(bus: Bus, index: int) -> Callable[[], Awaitable[int | None]]:
    return lambda: _publish(bus, index)


async def test_streams_and_leases_are_r3_and_survive_their_leader(nats_cluster: NatsCluster) -> None:
    bus = await connect(nats_cluster.url, "cluster-test", ping_interval=1.0)
    try:
        await reset_jetstream(bus)
        await ensure_streams(bus.js, StreamSettings(replicas=3))
        await ensure_streams(bus.js)  # a service on the default (1) must not lower them
        info = await bus.js.stream_info(subjects.OBJECTS_STREAM)
        assert info.config.num_replicas == 3
        assert info.cluster is not None and len(info.cluster.replicas or []) == 2
        history = await bus.js.stream_info(subjects.HISTORY_STREAM)  # replicated like the others
        assert history.config.num_replicas == 3
        assert history.cluster is not None and len(history.cluster.replicas or []) == 2
        kv = await open_bucket(bus, "cluster-test-leases", replicas=3)
        assert (await kv.status()).stream_info.config.num_replicas == 3

        acked = [await eventually(_publisher(bus, i), what="a publish") for i in range(20)]
        leader = nats_cluster.server(info.cluster.leader or "")
        leader.kill()
        more = [
            await eventually(_publisher(bus, i), within=30, what="a publish after the kill")
            for i in range(20, 30)
        ]
        after = await bus.js.stream_info(subjects.OBJECTS_STREAM)
        assert after.cluster is not None and after.cluster.leader != leader.name
        leader.start()
        for seq in acked + more:
            assert (await bus.js.get_msg(subjects.OBJECTS_STREAM, seq)).seq == seq
    finally:
        await bus.close()
