"""The engine-upgrade service on a real NATS server: ObjectEvents in on LH_OBJECTS, commands out on
LH_COMMANDS, results in on LH_RESULTS — through the runtime harness, as deployed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import msgspec
import pytest
from nats.aio.msg import Msg

from corral_bus import MSG_ID_HEADER, Bus
from corral_decision import BOOTSTRAP, service_main
from corral_engine_upgrade.service import DEFINITION, EngineUpgradeConfig
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING, REQUIRED_KINDS
from corral_model import codec
from corral_model.envelopes import Command, CommandResult, EventType, ObjectEvent, Outcome
from corral_model.subjects import object_subject, result_subject, resync_subject
from corral_runtime.service import ServiceContext, serve
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
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
from tests.unit.engine_upgrade.sim import KINDS

pytestmark = pytest.mark.integration
T = TypeVar("T")


class Cluster:
    """Publishes objects to LH_OBJECTS the way the watcher does, with increasing resourceVersions."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.rv = 100

    async def put(self, *objs: Any) -> None:
        for obj in objs:
            self.rv += 1
            kind = KINDS[type(obj)]
            obj = msgspec.structs.replace(
                obj, metadata=msgspec.structs.replace(obj.metadata, resource_version=str(self.rv))
            )
            event = ObjectEvent(
                type=EventType.MODIFIED,
                kind=kind,
                namespace=NS,
                name=obj.metadata.name,
                uid=f"uid-{obj.metadata.name}",
                resource_version=str(self.rv),
                object=obj,
            )
            await self.bus.js.publish(
                object_subject(kind, NS, obj.metadata.name),
                codec.encode(event),
                headers={MSG_ID_HEADER: event.event_id},
            )

    async def resync(self) -> None:
        for kind in sorted(REQUIRED_KINDS):
            event: ObjectEvent[Any] = ObjectEvent(
                type=EventType.RESYNCED, kind=kind, namespace=NS, name="", resource_version=str(self.rv)
            )
            await self.bus.js.publish(
                resync_subject(kind, NS), codec.encode(event), headers={MSG_ID_HEADER: event.event_id}
            )


class Service:
    def __init__(self, nats_url: str, instance: str = "eu-1", handover_delay_s: float = 0.0) -> None:
        self.config = msgspec.convert(
            {
                "service": "engine-upgrade",
                "instance": instance,
                "nats_url": nats_url,
                "health_port": 0,
                "health_host": "127.0.0.1",
                "log_level": "warning",
                "lease_ttl_s": 2.0,
                "shutdown_grace_s": 5.0,
                "debounce_s": 0.01,
                "handover_delay_s": handover_delay_s,
            },
            EngineUpgradeConfig,
        )
        self.ctx: ServiceContext[EngineUpgradeConfig] | None = None
        self.task: asyncio.Task[int] | None = None
        self.runner: Any = None

    async def _main(self, ctx: ServiceContext[EngineUpgradeConfig]) -> None:
        self.ctx = ctx
        await service_main(DEFINITION, on_runner=self._runner)(ctx)

    def _runner(self, runner: Any) -> None:
        self.runner = runner

    @property
    def is_leader(self) -> bool:
        return self.ctx is not None and self.ctx.is_leader

    async def start(self) -> None:
        self.task = asyncio.create_task(
            serve(self.config, self._main, leader_election=True, ready_when=[BOOTSTRAP])
        )

    async def stop(self) -> int:
        assert self.task is not None
        if self.ctx is not None:
            self.ctx.stop.set()
        return await asyncio.wait_for(self.task, 30)


@contextlib.asynccontextmanager
async def commands_seen(bus: Bus) -> AsyncIterator[list[tuple[Msg, Command]]]:
    """Every command published on lh.cmd.engine-upgrade.> while the block runs (core subscription)."""
    seen: list[tuple[Msg, Command]] = []

    async def on_message(msg: Msg) -> None:
        seen.append((msg, codec.decode(msg.data, Command)))

    sub = await bus.nc.subscribe("lh.cmd.engine-upgrade.>", cb=on_message)
    try:
        yield seen
    finally:
        await sub.unsubscribe()


async def test_commands_follow_the_limit_and_a_refusal_is_redecided_from_fresh_state(
    bus: Bus, nats_server: NatsServer
) -> None:
    cluster = Cluster(bus)
    await cluster.put(*(longhorn_node(n) for n in NODES))
    await cluster.put(engine_image(OLD, api=5), engine_image(NEW))
    await cluster.put(setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, "1"))
    a, b = volume("vol-a"), volume("vol-b")
    for vol in (a, b):
        await cluster.put(vol, *(replica(vol.metadata.name, i, n) for i, n in enumerate(NODES)))
    await cluster.resync()
    # Garbage on the bus is skipped and counted, never fatal.
    await bus.js.publish(
        object_subject("volume", NS, "junk"), b"not an event", headers={MSG_ID_HEADER: "junk-1"}
    )

    service = Service(nats_server.url)
    async with commands_seen(bus) as seen:
        await service.start()
        try:
            await eventually(lambda: _ready(service), what="the service to bootstrap")
            await eventually(lambda: _one(seen), what="the first command")
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
            await cluster.put(volume("vol-a", state="detached"))

            async def detach_in_view() -> bool:
                record = service.runner.decider.view.volume(NS, "vol-a")
                return record is not None and record.state == "detached"

            await eventually(detach_in_view, what="the service's view to show vol-a detached")
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
            assert service.ctx is not None and service.ctx.is_leader
            assert service.runner.metrics.bad_events._value.get() == 1
        finally:
            assert await service.stop() == 0


async def _ready(service: Service) -> bool:
    if service.task is not None and service.task.done():
        raise AssertionError(f"service exited early: {service.task.result()}")
    return service.ctx is not None and service.ctx.readiness.ready


async def _one(seen: list[Any]) -> bool:
    return len(seen) >= 1


async def test_only_the_leader_decides_and_a_standby_takes_over(bus: Bus, nats_server: NatsServer) -> None:
    cluster = Cluster(bus)
    await cluster.put(*(longhorn_node(n) for n in NODES))
    await cluster.put(engine_image(OLD, api=5), engine_image(NEW))
    await cluster.put(setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, "1"))
    a, b = volume("vol-a"), volume("vol-b")
    for vol in (a, b):
        await cluster.put(vol, *(replica(vol.metadata.name, i, n) for i, n in enumerate(NODES)))
    await cluster.resync()

    first, second = Service(nats_server.url, "eu-1", 0.2), Service(nats_server.url, "eu-2", 0.2)
    async with commands_seen(bus) as seen:
        await first.start()
        await second.start()
        try:
            await eventually(lambda: _ready(first), what="eu-1 ready")
            await eventually(lambda: _ready(second), what="eu-2 ready")
            await eventually(lambda: _one(seen), what="the first command")
            leader, standby = (first, second) if first.is_leader else (second, first)
            assert not standby.is_leader
            assert standby.runner.decider.ready  # warm, but it decides nothing
            assert [c.target.name for _, c in seen] == ["vol-a"]
            assert standby.runner.metrics.commands.labels("live")._value.get() == 0

            # The leader goes away (gracefully: it releases the lease); the standby takes over.
            assert await leader.stop() == 0
            await eventually(lambda: _leads(standby), what="the standby to take over")
            # vol-a finishes its upgrade: the new leader fills the freed slot with vol-b.
            await cluster.put(msgspec.structs.replace(a, spec=msgspec.structs.replace(a.spec, image=NEW)))
            await cluster.put(volume("vol-a", image=NEW))

            async def b_commanded() -> bool:
                return any(c.target.name == "vol-b" for _, c in seen)

            await eventually(b_commanded, what="the new leader to command vol-b")
            # Counted once its publication is acknowledged, which may come just after a subscriber
            # already saw the message.
            await eventually(
                lambda: standby.runner.metrics.commands.labels("live")._value.get() >= 1,
                what="the new leader to count its command",
            )
        finally:
            for service in (first, second):
                if service.task is not None and not service.task.done():
                    await service.stop()


async def _leads(service: Service) -> bool:
    return service.is_leader
