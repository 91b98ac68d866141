"""corral's NATS users on a real server: each may do its job, and every forbidden publish and
subscription is denied by the server (corral_bus.permissions).

The forbidden ones are what the issue-19 probe did as an anonymous client (commands under another
service's name, a forged Setting event on LH_OBJECTS, another service's lease key) and what would
undo the bus contract (deleting or purging a stream, acking or deleting the actuator's work,
reading another user's replies). Each is tried on its own connection state and must come back as
the server's permissions violation, with nothing stored in the stream it aimed at.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import msgspec
import nats
import pytest
from nats.errors import Error as NatsError
from nats.errors import NoServersError

from corral_bus import BootstrapReader, Bus, Consumer, ConsumerSpec, Delivery, Lease, Publisher
from corral_bus.auth import NatsAuth
from corral_bus.lease import LeaseRecord
from corral_bus.liveness import Probe, Responder, liveness_subject, probe
from corral_bus.permissions import ACTUATOR, ACTUATOR_DURABLE, READER, WATCHER
from corral_bus.streams import check_streams
from corral_model import codec
from corral_model.envelopes import Command, FieldValue, Target, Verb, new_command
from corral_model.subjects import COMMAND_STREAMS, OBJECTS_STREAM, RESULTS_STREAM, command_stream
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.secure_nats import connect_as

pytestmark = pytest.mark.integration

NS = "longhorn-system"
ENGINE_UPGRADE_COMMANDS = command_stream("engine-upgrade")
SETTING_SYNC_COMMANDS = command_stream("setting-sync")
# The forged Setting of the probe: the per-node limit raised, with a resourceVersion of 10^12.
FORGED_SETTING = b'{"schema":1,"type":"MODIFIED","kind":"setting","resourceVersion":"1000000000000"}'
SETTING_SUBJECT = f"lh.obj.setting.{NS}.concurrent-automatic-engine-upgrade-per-node-limit"

FORBIDDEN_PUBLISH: dict[str, list[str]] = {
    WATCHER: [
        f"lh.cmd.engine-upgrade.volume.{NS}.pvc-1",
        f"lh.res.engine-upgrade.volume.{NS}.pvc-1",
        "lh.dead.lh_commands.forged",
        "$KV.corral-leases.engine-upgrade",
        f"$JS.API.STREAM.DELETE.{OBJECTS_STREAM}",
        f"$JS.API.STREAM.PURGE.{OBJECTS_STREAM}",
        "$JS.API.STREAM.CREATE.ROGUE",
        f"$JS.API.CONSUMER.CREATE.{ENGINE_UPGRADE_COMMANDS}",
        "corral.lease.engine-upgrade.replica-1",
        "_INBOX.engine-upgrade.forged-reply",
    ],
    "engine-upgrade": [
        SETTING_SUBJECT,
        f"lh.cmd.setting-sync.daemonset.{NS}.longhorn-csi-plugin",
        f"lh.cmd.v2-upgrade.replica.{NS}.r-1",
        f"lh.cmd.im-restart.pod.{NS}.instance-manager-1",
        f"lh.res.engine-upgrade.volume.{NS}.pvc-1",
        "$KV.corral-leases.setting-sync",
        "$KV.corral-leases.actuator",
        f"$JS.API.STREAM.PURGE.{ENGINE_UPGRADE_COMMANDS}",
        f"$JS.API.STREAM.MSG.DELETE.{ENGINE_UPGRADE_COMMANDS}",
        f"$JS.API.STREAM.UPDATE.{OBJECTS_STREAM}",
        f"$JS.API.CONSUMER.CREATE.{ENGINE_UPGRADE_COMMANDS}",
        f"$JS.API.CONSUMER.DELETE.{ENGINE_UPGRADE_COMMANDS}.{ACTUATOR_DURABLE}",
        f"$JS.ACK.{ENGINE_UPGRADE_COMMANDS}.{ACTUATOR_DURABLE}.1.1.1.1.0",
        f"$JS.API.DIRECT.GET.{SETTING_SYNC_COMMANDS}",
        f"$JS.API.STREAM.MSG.GET.{SETTING_SYNC_COMMANDS}",
        "_INBOX.actuator.forged-reply",
        "corral.lease.setting-sync.replica-1",
        "corral.lease.actuator.replica-1",
        "corral.lease.engine-upgrade.replica-1.more",
        "_INBOX.setting-sync.forged-reply",
    ],
    ACTUATOR: [
        SETTING_SUBJECT,
        f"lh.cmd.engine-upgrade.volume.{NS}.pvc-1",
        "$KV.corral-leases.engine-upgrade",
        f"$JS.API.STREAM.DELETE.{RESULTS_STREAM}",
        f"$JS.API.CONSUMER.DELETE.{ENGINE_UPGRADE_COMMANDS}.{ACTUATOR_DURABLE}",
        "corral.lease.engine-upgrade.replica-1",
        "_INBOX.engine-upgrade.forged-reply",
    ],
    READER: [
        SETTING_SUBJECT,
        f"lh.cmd.engine-upgrade.volume.{NS}.pvc-1",
        f"lh.res.engine-upgrade.volume.{NS}.pvc-1",
        "lh.dead.lh_objects.forged",
        "$KV.corral-leases.actuator",
        f"$JS.API.CONSUMER.CREATE.{ENGINE_UPGRADE_COMMANDS}",
        f"$JS.API.STREAM.MSG.DELETE.{ENGINE_UPGRADE_COMMANDS}",
        f"$JS.API.CONSUMER.CREATE.{OBJECTS_STREAM}",
        f"$JS.API.CONSUMER.CREATE.{OBJECTS_STREAM}.rogue",
        f"$JS.API.STREAM.PURGE.{RESULTS_STREAM}",
        f"$JS.ACK.{OBJECTS_STREAM}.x.1.1.1.1.0",
        "corral.lease.engine-upgrade.replica-1",
        "_INBOX.reader.forged-reply",
    ],
}

FORBIDDEN_SUBSCRIBE: dict[str, list[str]] = {
    WATCHER: ["lh.cmd.>", "_INBOX.>", "_INBOX.actuator.>", "$KV.corral-leases.>", ">", "corral.lease.>"],
    "engine-upgrade": [
        "lh.cmd.setting-sync.>",
        "lh.cmd.>",
        "_INBOX.>",
        "_INBOX.reader.>",
        "$JS.EVENT.>",
        "corral.lease.>",
        "corral.lease.setting-sync.*",
        "corral.lease.actuator.replica-1",
    ],
    ACTUATOR: ["_INBOX.>", "lh.obj.>", "$JS.API.>", "corral.lease.engine-upgrade.*"],
    READER: ["_INBOX.>", "_INBOX.actuator.>", "$KV.>", "$JS.>", "corral.lease.>"],
}


async def _denied(bus: Bus, attempt: Any) -> str:
    """Run `attempt` (a coroutine function) and return the server's permissions violation for it."""
    bus.denials.clear()
    await attempt()
    await bus.nc.flush()
    await eventually(lambda: len(bus.denials) > 0, within=5.0, what="the server denying it")
    return bus.denials[-1]


@pytest.mark.parametrize("user", sorted(FORBIDDEN_PUBLISH))
async def test_each_forbidden_publish_is_denied(secure_nats: NatsServer, secure_bus: Bus, user: str) -> None:
    objects_before = (await secure_bus.js.stream_info(OBJECTS_STREAM)).state.messages
    commands_before = [(await secure_bus.js.stream_info(s)).state.messages for s in COMMAND_STREAMS]
    bus = await connect_as(secure_nats, user)
    try:
        for subject in FORBIDDEN_PUBLISH[user]:

            async def publish(subject: str = subject) -> None:
                await bus.nc.publish(subject, FORGED_SETTING, reply=bus.nc.new_inbox())

            denial = await _denied(bus, publish)
            assert f'publish to "{subject.lower()}"' in denial.lower(), (user, subject, denial)
        assert bus.nc.is_connected  # a denial is an answer, not a broken connection
    finally:
        await bus.close()
    assert (await secure_bus.js.stream_info(OBJECTS_STREAM)).state.messages == objects_before
    assert [(await secure_bus.js.stream_info(s)).state.messages for s in COMMAND_STREAMS] == commands_before
    assert {i.config.name for i in await secure_bus.js.streams_info()} >= {OBJECTS_STREAM, RESULTS_STREAM}


@pytest.mark.parametrize("user", sorted(FORBIDDEN_SUBSCRIBE))
async def test_each_forbidden_subscription_is_denied(secure_nats: NatsServer, user: str) -> None:
    bus = await connect_as(secure_nats, user)
    try:
        for subject in FORBIDDEN_SUBSCRIBE[user]:

            async def subscribe(subject: str = subject) -> None:
                await bus.nc.subscribe(subject)

            denial = await _denied(bus, subscribe)
            assert f'subscription to "{subject.lower()}"' in denial.lower(), (user, subject, denial)
    finally:
        await bus.close()


async def test_no_anonymous_client_and_no_wrong_password(secure_nats: NatsServer) -> None:
    for auth in (NatsAuth(), NatsAuth(user=WATCHER, password="not-the-password")):
        with pytest.raises((NatsError, NoServersError, OSError)):
            nc = await nats.connect(
                secure_nats.url, allow_reconnect=False, connect_timeout=2, **auth.connect_options()
            )
            await nc.close()


def _command(service: str) -> Command:
    return new_command(
        service=service,
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace=NS, name="pvc-1"),
        changes=(FieldValue(path="/spec/image", value="new"),),
        preconditions=(FieldValue(path="/spec/image", value="old"),),
        created_at=time.time(),
    )


async def test_each_user_can_do_its_job(secure_nats: NatsServer, secure_bus: Bus) -> None:
    """The allow-lists are not so tight that a service cannot work: the watcher publishes an event,
    engine-upgrade reads it, leads through its lease and publishes a command, the actuator consumes
    the command and publishes a result, and the reader reads all of it, none of them denied."""
    watcher = await connect_as(secure_nats, WATCHER)
    decider = await connect_as(secure_nats, "engine-upgrade")
    actuator = await connect_as(secure_nats, ACTUATOR)
    reader = await connect_as(secure_nats, READER)
    buses = (watcher, decider, actuator, reader)
    try:
        for bus in buses:
            await check_streams(bus.js)  # every service's start-up check, made by the setup step
        publisher = Publisher(watcher)
        await publisher.publish(f"lh.obj.volume.{NS}.pvc-1", b'{"schema":1}', msg_id="e1")
        await publisher.publish("lh.dead.lh_objects.undecodable", b'{"schema":1}', msg_id="d1")
        await publisher.flush()
        await publisher.close()

        view = BootstrapReader(decider, [f"lh.obj.volume.{NS}.>"])
        async with asyncio.timeout(10):
            async for message in view:
                assert message.subject == f"lh.obj.volume.{NS}.pvc-1"
                break
        await view.close()
        # A takeover's catch-up: where LH_OBJECTS ends (corral_decision.command_feed.stream_end).
        assert (await decider.js.get_last_msg(OBJECTS_STREAM, f"lh.obj.volume.{NS}.pvc-1")).seq
        lease = Lease(decider, "engine-upgrade", "replica-1", ttl=5.0)
        await lease.start()
        await eventually(lambda: lease.is_leader, within=10.0)
        # Its liveness subject answered under its permissions, so standbys may probe it.
        kv = await decider.js.key_value("corral-leases")
        record = msgspec.json.decode((await kv.get("engine-upgrade")).value or b"", type=LeaseRecord)
        assert record.liveness == lease.liveness_subject and record.server == decider.server_id
        command = _command("engine-upgrade")
        ack = await decider.js.publish(
            f"lh.cmd.engine-upgrade.volume.{NS}.pvc-1",
            codec.encode(command),
            headers={"Nats-Msg-Id": command.id},
        )
        assert ack.seq > 0
        await lease.stop()

        handled: list[Command] = []

        async def handle(delivery: Delivery) -> None:
            got = delivery.decode(Command)
            handled.append(got)
            await actuator.js.publish(
                f"lh.res.engine-upgrade.volume.{NS}.pvc-1", msgspec.json.encode({"id": got.id})
            )

        spec = ConsumerSpec(stream=command_stream("engine-upgrade"), durable=ACTUATOR_DURABLE)
        consumer = Consumer(actuator, spec, handle)
        consumer.start()
        await eventually(lambda: len(handled) == 1, within=10.0)
        await consumer.stop()

        results = BootstrapReader(reader, ["lh.res.>"], stream=RESULTS_STREAM)
        async with asyncio.timeout(10):
            async for message in results:
                assert command.id in message.data.decode()
                break
        await results.close()
        for bus in buses:
            await bus.nc.flush()
            assert not bus.denials, (bus.name, list(bus.denials))
    finally:
        for bus in buses:
            await bus.close()


async def test_a_service_can_neither_suppress_nor_read_another_services_commands(
    secure_nats: NatsServer, secure_bus: Bus
) -> None:
    """Issue 29's probe: engine-upgrade published junk under setting-sync's next command id, and
    JetStream, deduplicating by `Nats-Msg-Id` across the one shared LH_COMMANDS, dropped the real
    command as a duplicate. Each sender now has its own command stream: the junk lands in
    engine-upgrade's own (where the actuator dead-letters it), the real command is stored, and
    engine-upgrade cannot read setting-sync's queue."""
    attacker = await connect_as(secure_nats, "engine-upgrade")
    victim = await connect_as(secure_nats, "setting-sync")
    try:
        command = _command("setting-sync")
        junk = await attacker.js.publish(
            f"lh.cmd.engine-upgrade.volume.{NS}.pvc-1", b"junk", headers={"Nats-Msg-Id": command.id}
        )
        assert junk.stream == command_stream("engine-upgrade")
        real = await victim.js.publish(
            f"lh.cmd.setting-sync.volume.{NS}.pvc-1",
            codec.encode(command),
            headers={"Nats-Msg-Id": command.id},
        )
        assert (real.stream, real.duplicate) == (command_stream("setting-sync"), None)
        stored = await secure_bus.js.get_msg(command_stream("setting-sync"), real.seq)
        assert codec.decode(stored.data or b"", Command).id == command.id

        async def read_the_victims_queue() -> None:
            with contextlib.suppress(Exception):  # denied: no answer comes
                await attacker.js.get_msg(command_stream("setting-sync"), real.seq)

        denial = await _denied(attacker, read_the_victims_queue)
        assert command_stream("setting-sync").lower() in denial.lower()
    finally:
        await attacker.close()
        await victim.close()


async def test_liveness_probes_stay_within_a_service(secure_nats: NatsServer) -> None:
    """A replica of engine-upgrade answers on its liveness subject and a sibling asks it (and gets
    "no responders" once the answering connection is gone); setting-sync may not ask it at all."""
    holder_bus = await connect_as(secure_nats, "engine-upgrade")
    standby_bus = await connect_as(secure_nats, "engine-upgrade")
    other = await connect_as(secure_nats, "setting-sync")
    responder = Responder(holder_bus, liveness_subject("engine-upgrade", "replica-1"))
    try:
        await responder.start()
        assert responder.subject == "corral.lease.engine-upgrade.replica-1"
        within = 2.0
        assert await responder.verify(within)
        server = holder_bus.server_id
        assert server and standby_bus.server_id == server
        assert await probe(standby_bus, responder.subject, server, within) is Probe.ANSWERED

        async def ask_another_services_replica() -> None:
            assert await probe(other, responder.subject, server, 0.5) is Probe.SILENT

        denial = await _denied(other, ask_another_services_replica)
        assert f'publish to "{responder.subject}"' in denial.lower(), denial
        await holder_bus.close()
        # The server forgets a closed connection's subscriptions on its own time: until it has, a
        # probe goes unanswered (SILENT, which proves nothing); then "no responders" says GONE.
        seen: list[Probe] = []

        async def gone() -> bool:
            seen.append(await probe(standby_bus, responder.subject, server, 0.5))
            return seen[-1] is Probe.GONE

        await eventually(gone, within=10, what="the holder's closed connection found gone")
        assert set(seen) <= {Probe.SILENT, Probe.GONE}, seen
        for bus in (holder_bus, standby_bus):
            assert not bus.denials, (bus.name, list(bus.denials))
    finally:
        await responder.stop()
        for bus in (holder_bus, standby_bus, other):
            await bus.close()
