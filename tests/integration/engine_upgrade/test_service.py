"""The engine-upgrade service on a real NATS server: ObjectEvents in on LH_OBJECTS, commands out on
LH_COMMANDS, results in on LH_RESULTS — through the runtime harness, as deployed."""

from __future__ import annotations

from typing import cast

import msgspec
import pytest

from corral_bus import MSG_ID_HEADER, Bus
from corral_engine_upgrade.core import EngineUpgradeDecider
from corral_engine_upgrade.service import DEFINITION
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING
from corral_model import codec
from corral_model.envelopes import Command, CommandResult, Outcome
from corral_model.longhorn import Volume
from corral_model.subjects import object_subject, result_subject
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.services import Running, decision_replica
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NODES,
    NS,
    OLD,
    engine_image,
    longhorn_node,
    replica,
    setting,
    volume,
)

pytestmark = pytest.mark.integration


def service(url: str, instance: str = "eu-1", handover_delay_s: float = 0.0) -> Running:
    return decision_replica(DEFINITION, url, instance, handover_delay_s=handover_delay_s)


async def seeded(bus: Bus) -> tuple[FakeWatcher, Volume]:
    """Three nodes, the old and new images, limit 1, two volumes on one owner node; listed."""
    cluster = FakeWatcher(bus, NS)
    await cluster.put(*(longhorn_node(n) for n in NODES))
    await cluster.put(engine_image(OLD, api=5), engine_image(NEW))
    await cluster.put(setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, "1"))
    a, b = volume("vol-a"), volume("vol-b")
    for vol in (a, b):
        await cluster.put(vol, *(replica(vol.metadata.name, i, n) for i, n in enumerate(NODES)))
    await cluster.resync(DEFINITION.reads)
    return cluster, a


def decider(running: Running) -> EngineUpgradeDecider:
    assert running.runner is not None
    return cast("EngineUpgradeDecider", running.runner.decider)


async def test_commands_follow_the_limit_and_a_refusal_is_redecided_from_fresh_state(
    bus: Bus, nats_server: NatsServer
) -> None:
    cluster, _ = await seeded(bus)
    # Garbage on the bus is skipped and counted, never fatal.
    await bus.js.publish(
        object_subject("volume", NS, "junk"), b"not an event", headers={MSG_ID_HEADER: "junk-1"}
    )

    async with commands_seen(bus, "engine-upgrade") as seen:
        one = service(nats_server.url)
        try:
            await eventually(lambda: one.ready, what="the service to bootstrap and lead")
            await eventually(lambda: seen, what="the first command")
            msg, first = seen[0]
            assert msg.subject == f"lh.cmd.engine-upgrade.volume.{NS}.vol-a"
            assert msg.headers is not None and msg.headers[MSG_ID_HEADER] == first.id
            assert [(c.path, c.value) for c in first.changes] == [("/spec/image", NEW)]
            assert ("/status/state", "attached") in [(p.path, p.value) for p in first.preconditions]

            # vol-a detaches meanwhile, so the actuator refuses the command. The service must see the
            # detach before the refusal: LH_OBJECTS and LH_RESULTS are read by separate consumers, and
            # a refusal read first would free the slot while the view still holds only the state the
            # command was decided on — vol-a would then wait out its backoff and vol-b (same owner
            # node) would rightly take the slot, which is not what this test is about.
            # vol-b detaches too: a node's free slot goes to live (attached) upgrades first, so with
            # vol-b still attached it, not the refused vol-a, would rightly be next.
            await cluster.put(volume("vol-a", state="detached"), volume("vol-b", state="detached"))

            async def detach_in_view() -> bool:
                records = [decider(one).view.volume(NS, name) for name in ("vol-a", "vol-b")]
                return all(r is not None and r.state == "detached" for r in records)

            await eventually(detach_in_view, what="the service's view to show both volumes detached")
            # Fresher state alone frees nothing: the command is still pending, so the slot stays taken.
            assert [c.target.name for _, c in seen] == ["vol-a"]
            refusal = CommandResult(
                command_id=first.id,
                service="engine-upgrade",
                target=first.target,
                outcome=Outcome.PRECONDITION_FAILED,
            )
            await bus.js.publish(
                result_subject("engine-upgrade", "volume", NS, "vol-a"),
                codec.encode(refusal),
                headers={MSG_ID_HEADER: f"{first.id}:precondition-failed"},
            )

            async def redecided() -> list[Command]:
                return [c for _, c in seen[1:] if c.target.name == "vol-a"]

            [again] = await eventually(redecided, what="vol-a decided again from its fresh state")
            assert again.id != first.id
            assert ("/status/state", "detached") in [(p.path, p.value) for p in again.preconditions]
            # the limit held throughout: vol-b (same owner node) was never commanded
            assert [c.target.name for _, c in seen] == ["vol-a", "vol-a"]
            assert one.ready
            assert one.runner is not None and one.runner.metrics.bad_events._value.get() == 1
        finally:
            await one.stop()
            assert one.task.result() == 0


async def test_only_the_leader_decides_and_a_standby_takes_over(bus: Bus, nats_server: NatsServer) -> None:
    cluster, a = await seeded(bus)
    async with commands_seen(bus, "engine-upgrade") as seen:
        first, second = service(nats_server.url, "eu-1", 0.2), service(nats_server.url, "eu-2", 0.2)
        try:
            await eventually(lambda: first.bootstrapped and second.bootstrapped, what="both ready")
            await eventually(lambda: seen, what="the first command")
            leader, standby = (first, second) if first.ready else (second, first)
            assert not standby.ready and standby.runner is not None
            assert standby.runner.decider.ready  # warm, but it decides nothing
            assert [c.target.name for _, c in seen] == ["vol-a"]
            assert standby.runner.metrics.commands.labels("live")._value.get() == 0

            # The leader goes away (gracefully: it releases the lease); the standby takes over.
            await leader.stop()
            assert leader.task.result() == 0
            await eventually(lambda: standby.ready, what="the standby to take over")
            # vol-a finishes its upgrade: the new leader fills the freed slot with vol-b.
            await cluster.put(msgspec.structs.replace(a, spec=msgspec.structs.replace(a.spec, image=NEW)))
            await cluster.put(volume("vol-a", image=NEW))

            async def b_commanded() -> bool:
                return any(c.target.name == "vol-b" for _, c in seen)

            await eventually(b_commanded, what="the new leader to command vol-b")
            # Counted once its publication is acknowledged, which may come just after a subscriber
            # already saw the message.
            runner = standby.runner
            await eventually(
                lambda: runner.metrics.commands.labels("live")._value.get() >= 1,
                what="the new leader to count its command",
            )
        finally:
            for running in (first, second):
                await running.stop()
