"""v2-upgrade on a real NATS server, in the test's event loop: the in-process world of the unit
tests plays the watcher (its objects on LH_OBJECTS at their resourceVersions) and the actuator
(each command applied or refused, its result on LH_RESULTS). A three-node upgrade completes with
the decider killed and replaced by a fresh replica in the middle of a node, and the replacement
repeats nothing: one node upgrade, one IM delete per node."""

from __future__ import annotations

import functools
from collections.abc import Callable
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


@pytest.mark.parametrize("reaction_first", [False, True], ids=["in-order", "reaction-first"])
async def test_an_upgrade_survives_a_decider_replaced_mid_node(
    bus: Bus, nats_server: NatsServer, reaction_first: bool
) -> None:
    """`reaction_first`: while node-1 is switching over, each write's result is reported only once
    the decider has already reacted to the written object with its next command (a slow actuator;
    on a loaded machine the two race, which is how CI saw node-1 never switching over: the first
    decider took it through to completed). The decider must still be replaced in that state."""
    world = cluster(volumes={"vol-a": "node-1", "vol-b": "node-2"})
    world.put(manager())
    watcher = Watcher(bus, world)
    await watcher.sync()
    await watcher.resync()
    handled = 0
    replicas: list[Running] = []
    trail: list[str] = []  # every state the node upgrades passed through, for a failure to name

    def node_1_switching() -> bool:
        upgrades = world.node_upgrades("node-1")
        return bool(upgrades) and upgrades[0].status.state == "switching-over"

    def completed() -> bool:
        return str(world.get("dataengineupgrademanager", "upgrade").status.state) == "completed"

    def follow() -> None:
        now = ", ".join(f"{u.spec.node_id} {u.status.state}" for u in world.all("nodedataengineupgrade"))
        if not trail or trail[-1] != now:
            trail.append(now)

    async with commands_seen(bus, "v2-upgrade") as seen:

        def more_than(count: int) -> bool:
            return len(seen) > count

        async def act(until: Callable[[], bool]) -> bool:
            """Play the actuator and the data plane for the commands seen so far, one at a time,
            stopping as soon as `until` holds. The decider runs in this loop: while one command's
            objects and result are published, its reaction (the next command) can reach `seen`,
            and a state checked only once `seen` is drained may have come and gone unseen (node-1
            went on from switching-over to completed under the first decider, and the wait for it
            timed out)."""
            nonlocal handled
            while handled < len(seen) and not until():
                command = seen[handled][1]
                handled += 1
                applied = world.apply(command)
                world.data_plane()
                follow()
                await watcher.sync()
                if reaction_first and node_1_switching():
                    await eventually(functools.partial(more_than, handled), what="the decider's next command")
                outcome = Outcome.APPLIED if applied else Outcome.PRECONDITION_FAILED
                await report(bus, command, outcome, token_of(command.target.kind))
            return until()

        async def wait_for(until: Callable[[], bool], within: float, what: str) -> None:
            async def acted() -> bool:
                return await act(until)

            try:
                await eventually(acted, within=within, what=what)
            except AssertionError as timeout:
                raise AssertionError(f"{timeout}; node upgrades went through: {trail}") from None

        replicas.append(decision_replica(DEFINITION, nats_server.url, "v2u-1"))
        try:
            await wait_for(node_1_switching, 30, "node-1 switching over")
            await replicas[0].stop()
            assert node_1_switching(), trail
            replicas.append(decision_replica(DEFINITION, nats_server.url, "v2u-2"))
            await wait_for(completed, 60, "the upgrade to complete")
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
