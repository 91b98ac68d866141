"""v2-upgrade on a real NATS server, in the test's event loop: the in-process world of the unit
tests plays the watcher (its objects on LH_OBJECTS at their resourceVersions) and the actuator
(each command applied or refused, its result on LH_RESULTS). A three-node upgrade completes with
the decider killed and replaced by a fresh replica in the middle of a node, and the replacement
repeats nothing: one node upgrade, one IM delete per node."""

from __future__ import annotations

from typing import Any

import pytest

from corral_bus import Bus
from corral_bus.streams import MSG_ID_HEADER
from corral_model import codec
from corral_model.envelopes import EventType, ObjectEvent, Outcome, Verb
from corral_model.subjects import object_subject, resync_subject
from corral_v2_upgrade.core import READS
from corral_v2_upgrade.service import DEFINITION
from tests.fixtures.bus_traffic import commands_seen, report
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.services import Running, decision_replica
from tests.unit.v2_upgrade.world import NS, World, cluster, manager, token_of

pytestmark = pytest.mark.integration


class Watcher:
    """Publishes what changed in the world since the last call, as the watcher would."""

    def __init__(self, bus: Bus, world: World) -> None:
        self.bus, self.world = bus, world
        self.published: dict[tuple[str, str], str] = {}

    async def sync(self) -> None:
        current = {key: obj for key, obj in self.world.objects.items() if key[0] in READS}
        for key, obj in sorted(current.items()):
            if self.published.get(key) != obj.metadata.resource_version:
                await self._publish(EventType.MODIFIED, key[0], obj)
                self.published[key] = obj.metadata.resource_version
        for key in sorted(set(self.published) - set(current)):
            del self.published[key]
            self.world.rv += 1
            await self._publish(EventType.DELETED, key[0], None, key[1], str(self.world.rv))

    async def resync(self) -> None:
        for token in sorted(READS):
            namespace = "" if token == "kubenode" else NS
            event: ObjectEvent[Any] = ObjectEvent(
                type=EventType.RESYNCED, kind=token, namespace=namespace, name=""
            )
            await self.bus.js.publish(
                resync_subject(token, namespace),
                codec.encode(event),
                headers={MSG_ID_HEADER: f"resync-{token}"},
            )

    async def _publish(self, type_: EventType, token: str, obj: Any, name: str = "", rv: str = "") -> None:
        namespace = "" if token == "kubenode" else NS
        name = name or obj.metadata.name
        event: ObjectEvent[Any] = ObjectEvent(
            type=type_,
            kind=token,
            namespace=namespace,
            name=name,
            uid=f"uid-{name}",
            resource_version=rv or obj.metadata.resource_version,
            object=obj,
        )
        await self.bus.js.publish(
            object_subject(token, namespace, name),
            codec.encode(event),
            headers={MSG_ID_HEADER: event.event_id},
        )


async def test_an_upgrade_survives_a_decider_replaced_mid_node(bus: Bus, nats_server: NatsServer) -> None:
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"})
    world.put(manager())
    watcher = Watcher(bus, world)
    await watcher.sync()
    await watcher.resync()
    handled = 0
    replicas: list[Running] = []

    async with commands_seen(bus, "v2-upgrade") as seen:

        async def act() -> bool:
            """Play the actuator and the data plane for every command seen so far."""
            nonlocal handled
            while handled < len(seen):
                command = seen[handled][1]
                handled += 1
                applied = world.apply(command)
                world.data_plane()
                await watcher.sync()
                outcome = Outcome.APPLIED if applied else Outcome.PRECONDITION_FAILED
                await report(bus, command, outcome, token_of(command.target.kind))
            return str(world.get("dataengineupgrademanager", "upgrade").status.state) == "completed"

        def node_1_switching() -> bool:
            upgrades = world.node_upgrades("node-1")
            return bool(upgrades) and upgrades[0].status.state == "switching-over"

        replicas.append(decision_replica(DEFINITION, nats_server.url, "v2u-1"))
        try:

            async def until_switching() -> bool:
                await act()
                return node_1_switching()

            await eventually(until_switching, what="node-1 switching over")
            await replicas[0].stop()
            replicas.append(decision_replica(DEFINITION, nats_server.url, "v2u-2"))
            await eventually(act, within=60, what="the upgrade to complete")
        finally:
            for running in replicas:
                await running.stop()

    creates = [c.target.name for c in world.applied if c.verb is Verb.CREATE]
    assert len(creates) == len(set(creates)) == 3
    deletes = [
        c.target.name for c in world.applied if c.verb is Verb.DELETE and c.target.kind == "InstanceManager"
    ]
    assert len(deletes) == len(set(deletes)) == 3
    status = world.get("dataengineupgrademanager", "upgrade").status
    assert {n: e.state for n, e in status.upgrade_nodes.items()} == dict.fromkeys(
        ("node-1", "node-2", "node-3"), "completed"
    )
