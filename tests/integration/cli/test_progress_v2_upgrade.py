"""`corral progress v2-upgrade` as an operator runs it, against a real NATS server: from the
objects a watcher would publish (an upgrade driven by v2-upgrade's own decider in process), it
prints the node in flight and its step, per node the volumes done / blocked with the blocker
("volume pvc-x has only 1 replica…"), each volume of the node in flight with its state and time in
state, and exits 0 with v2-upgrade's summary once the manager has finished."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import pytest

from corral_bus import Bus
from corral_model import longhorn as lh
from corral_v2_upgrade.core import READS
from tests.fixtures.bus_traffic import FakeWatcher
from tests.fixtures.nats import NatsServer
from tests.integration.cli.test_progress_command import DEADLINE_S, followed_progress
from tests.unit.v2_upgrade.world import NEW, NS, World, cluster, manager, replica

pytestmark = pytest.mark.integration
BLOCKER = "volume pvc-x has only 1 replica, which is not supported for live upgrade"


class Publisher:
    """Publishes the world's objects as the watcher would: namespaced ones, then kube nodes under
    the cluster-scope token, each kind listed once."""

    def __init__(self, bus: Bus) -> None:
        self.namespaced = FakeWatcher(bus, NS)
        self.cluster_scope = FakeWatcher(bus, "", rv=1_000_000)
        self.listed = False

    async def publish(self, world: World) -> None:
        objects: list[Any] = [o for (token, _), o in sorted(world.objects.items()) if token in READS]
        await self.namespaced.put(*(o for o in objects if not isinstance(o, lh.KubeNode)))
        await self.cluster_scope.put(*(o for o in objects if isinstance(o, lh.KubeNode)))
        if not self.listed:
            self.listed = True
            await self.namespaced.resync(sorted(set(READS) - {"kubenode"}))
            await self.cluster_scope.resync(["kubenode"])


def single_replica(world: World, name: str, replicas: int) -> None:
    vol = world.get("volume", name)
    world.put(
        msgspec.structs.replace(vol, spec=msgspec.structs.replace(vol.spec, number_of_replicas=replicas))
    )


async def test_blocked_then_a_volume_in_flight_then_done(bus: Bus, nats_server: NatsServer) -> None:
    world = cluster(volumes={"vol-a": "node-1", "pvc-x": "node-2"})
    world.clock.now = time.time() - 3600  # the upgrade started an hour ago: times in state in minutes
    single_replica(world, "pvc-x", 1)
    world.delete("replica", replica("pvc-x", "node-1").metadata.name)
    world.delete("replica", replica("pvc-x", "node-3").metadata.name)
    world.put(manager())
    world.start()
    for _ in range(40):  # node-1 goes through; node-2 is held by pvc-x
        world.step(tick=1.0)
    objects = Publisher(bus)
    await objects.publish(world)

    async with followed_progress("v2-upgrade", nats_server.url) as lines:
        await lines.until(r"v2-upgrade upgrade: upgrading 1/3; upgrading node-2 \(initializing for \d+m\)")
        await lines.until(r" node-1 +limit 0  in flight 0  done 1  waiting 0  blocked 0")
        await lines.until(rf" node-2 +limit 0  in flight 0  done 0  waiting 0  blocked 1 \({BLOCKER} 1\)")
        await lines.until(rf"node-2  waiting: {BLOCKER} \(for \d+m\)")

        # The operator adds replicas: node-2 goes on, and pvc-x's switch-over hangs.
        single_replica(world, "pvc-x", 3)
        world.stalled.add("pvc-x")
        for _ in range(30):
            world.step(tick=1.0)
        [upgrade] = world.node_upgrades("node-2")
        assert upgrade.status.volumes["pvc-x"].state == "switching-over"
        await objects.publish(world)
        await lines.until(r"upgrading node-2 \(switching-over for ")
        await lines.until(r" node-2 +limit 0  in flight 1  done 0")
        await lines.until(r"node-2  pvc-x  switching-over for \d+m")
        await lines.until(r"node-2  waiting: volume pvc-x is not switched over to node-")

        world.stalled.clear()
        assert world.run(limit=400) == "completed"
        await objects.publish(world)
        summary = await lines.until(r"^v2-upgrade done in ")
        assert f"2 v2 volumes on nodes upgraded to {NEW}, 0 in flight, 0 waiting" in summary
        assert await asyncio.wait_for(lines.proc.wait(), DEADLINE_S) == 0
