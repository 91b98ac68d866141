"""LH_HISTORY on a real server: JetStream copies every object event, every command and every result
into it, including what the origin streams themselves let go at once (a tombstone's rolled-up
events, more events of one object than LH_OBJECTS keeps, a command the actuator took and acked).
"""

from __future__ import annotations

import dataclasses

import pytest
from nats.js.api import AckPolicy, ConsumerConfig

from corral_bus import Bus, StreamSettings, ensure_streams, tombstone_headers
from corral_bus.permissions import ADMIN, READER, USERS, WATCHER
from corral_cli.events.reader import consume, get_message
from corral_model import subjects
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.secure_nats import connect_as

pytestmark = pytest.mark.integration

NS = "longhorn-system"
ENGINE_UPGRADE_COMMANDS = subjects.command_stream("engine-upgrade")


async def _history(bus: Bus) -> list[tuple[str, str, str]]:
    """(subject, Nats-Msg-Id, origin stream) of every message in LH_HISTORY, in its order."""
    info = await bus.js.stream_info(subjects.HISTORY_STREAM)
    out = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        message = await bus.js.get_msg(subjects.HISTORY_STREAM, seq)
        headers = message.headers or {}
        # A sourced copy names its origin in Nats-Stream-Source, a republished one in Nats-Stream.
        origin = headers.get("Nats-Stream-Source", "").split(" ")[0] or headers.get("Nats-Stream", "")
        subject = headers.get("Nats-Subject") or message.subject or ""
        out.append((subject, headers.get("Nats-Msg-Id", ""), origin))
    return out


@pytest.mark.real_nats  # the in-memory fake does not model stream sources
async def test_the_history_keeps_what_the_origin_streams_let_go(bus: Bus) -> None:
    volume = subjects.object_subject("volume", NS, "pvc-1")
    events = [f"volume:uid-1:{rv}" for rv in range(1, 9)]  # more than LH_OBJECTS keeps per object
    for msg_id in events:
        await bus.js.publish(volume, b"{}", headers={"Nats-Msg-Id": msg_id})
    await bus.js.publish(
        volume, b"{}", headers={"Nats-Msg-Id": "volume:uid-1:9:deleted", **tombstone_headers(60)}
    )
    # The actuator's durable consumer takes the command and acks it: the work queue forgets it.
    await bus.js.add_consumer(
        ENGINE_UPGRADE_COMMANDS, ConsumerConfig(durable_name="actuator", ack_policy=AckPolicy.EXPLICIT)
    )
    command = subjects.command_subject("engine-upgrade", "volume", NS, "pvc-1")
    await bus.js.publish(command, b"{}", headers={"Nats-Msg-Id": "engine-upgrade-c1"})
    await bus.js.publish(command, b"{}", headers={"Nats-Msg-Id": "engine-upgrade-c1"})  # a duplicate
    taken = await bus.js.pull_subscribe_bind("actuator", stream=ENGINE_UPGRADE_COMMANDS)
    for message in await taken.fetch(1, timeout=5):
        await message.ack_sync()
    result = subjects.result_subject("engine-upgrade", "volume", NS, "pvc-1")
    await bus.js.publish(result, b"{}", headers={"Nats-Msg-Id": "engine-upgrade-c1:applied"})

    # LH_OBJECTS keeps the last few events of the object (a tombstone no longer rolls them up: the
    # watcher publishes it as many times as the stream keeps per object); the history keeps all.
    kept = (await bus.js.stream_info(subjects.OBJECTS_STREAM)).state.messages
    assert kept < len(events) + 1

    async def queue_empty() -> bool:
        return (await bus.js.stream_info(ENGINE_UPGRADE_COMMANDS)).state.messages == 0

    await eventually(queue_empty, within=10, what="the acked command gone from the work queue")
    consumers = await bus.js.consumers_info(ENGINE_UPGRADE_COMMANDS)
    assert [c.name for c in consumers] == ["actuator"]  # the history takes nothing from the queue
    expected = [
        *((volume, msg_id, subjects.OBJECTS_STREAM) for msg_id in [*events, "volume:uid-1:9:deleted"]),
        (command, "engine-upgrade-c1", ENGINE_UPGRADE_COMMANDS),
        (result, "engine-upgrade-c1:applied", subjects.RESULTS_STREAM),
    ]

    async def recorded() -> bool:
        return sorted(await _history(bus)) == sorted(expected)

    await eventually(recorded, within=10, what="every event, the command and the result in LH_HISTORY")
    objects_in_order = [h for h in await _history(bus) if h[2] == subjects.OBJECTS_STREAM]
    assert objects_in_order == expected[:9]  # an origin's own order is kept


async def test_the_setup_sets_retention_and_a_service_check_leaves_it(bus: Bus) -> None:
    """The setup step tunes the history; a service's default settings never undo that. A bus from
    before the history (a command stream without its republish, no LH_HISTORY) is brought up to it."""
    await bus.js.delete_stream(subjects.HISTORY_STREAM)
    old = (await bus.js.stream_info(ENGINE_UPGRADE_COMMANDS)).config
    await bus.js.update_stream(dataclasses.replace(old, republish=None))
    assert (await bus.js.stream_info(ENGINE_UPGRADE_COMMANDS)).config.republish is None
    await ensure_streams(bus.js, StreamSettings(history_max_age=3600, history_max_bytes=1 << 20))
    from corral_bus.streams import check_streams

    await check_streams(bus.js)  # a service starting with the defaults
    config = (await bus.js.stream_info(subjects.HISTORY_STREAM)).config
    assert (config.max_age, config.max_bytes) == (3600, 1 << 20)
    assert (await bus.js.stream_info(ENGINE_UPGRADE_COMMANDS)).config.republish is not None
    assert sorted(s.name for s in config.sources or []) == sorted(
        [subjects.OBJECTS_STREAM, subjects.RESULTS_STREAM]
    )


HISTORY_CHANGES = [
    f"{subjects.HISTORY_PREFIX}.lh.cmd.engine-upgrade.volume.{NS}.forged",
    f"$JS.API.STREAM.PURGE.{subjects.HISTORY_STREAM}",
    f"$JS.API.STREAM.DELETE.{subjects.HISTORY_STREAM}",
    f"$JS.API.STREAM.UPDATE.{subjects.HISTORY_STREAM}",
    f"$JS.API.STREAM.MSG.DELETE.{subjects.HISTORY_STREAM}",
    f"$JS.API.STREAM.SNAPSHOT.{subjects.HISTORY_STREAM}",
    f"$JS.API.STREAM.RESTORE.{subjects.HISTORY_STREAM}",
]


@pytest.mark.real_nats
@pytest.mark.parametrize("user", [u for u in USERS if u != ADMIN])
async def test_only_admin_may_change_the_history_and_the_reader_reads_it(
    secure_nats: NatsServer, secure_bus: Bus, user: str
) -> None:
    """On a locked-down NATS: every user but `admin` is refused each way of changing or purging the
    history (the server's permissions violation, nothing gone), and the read-only `reader` reads
    it the way the CLI does (an ephemeral consumer, and message get)."""
    watcher = await connect_as(secure_nats, WATCHER)
    try:
        for rv in range(3):
            subject = subjects.object_subject("volume", NS, "pvc-1")
            await watcher.js.publish(subject, b"{}", headers={"Nats-Msg-Id": f"volume:uid-1:{rv}"})
    finally:
        await watcher.close()

    async def recorded() -> bool:
        return (await secure_bus.js.stream_info(subjects.HISTORY_STREAM)).state.messages == 3

    await eventually(recorded, within=10, what="three events in LH_HISTORY")
    bus = await connect_as(secure_nats, user)
    try:
        for subject in HISTORY_CHANGES:
            bus.denials.clear()
            await bus.nc.publish(subject, b"{}", reply=bus.nc.new_inbox())
            await bus.nc.flush()
            await eventually(lambda: bus.denials, within=5.0, what=f"{user} refused {subject}")
            assert f'publish to "{subject.lower()}"' in bus.denials[-1].lower(), (user, bus.denials)
        if user == READER:
            bus.denials.clear()
            read = [
                e async for _, e in consume(bus, subjects.HISTORY_STREAM, [f"{subjects.OBJECTS_PREFIX}.>"])
            ]
            assert [e.headers["Nats-Msg-Id"] for e in read] == [f"volume:uid-1:{rv}" for rv in range(3)]
            assert (await get_message(bus, subjects.HISTORY_STREAM, 1)) is not None
            assert not bus.denials, bus.denials
    finally:
        await bus.close()
    info = await secure_bus.js.stream_info(subjects.HISTORY_STREAM)
    assert info.state.messages == 3 and info.config.max_age == StreamSettings().history_max_age


@pytest.mark.real_nats
async def test_the_history_drops_a_copy_it_already_holds(bus: Bus) -> None:
    """A second copy with the same Nats-Msg-Id within the window (a republish retried, a source
    replayed after a leader change) is dropped by the history itself."""
    copy = f"{subjects.HISTORY_PREFIX}.{subjects.command_subject('engine-upgrade', 'volume', NS, 'pvc-1')}"
    first = await bus.js.publish(copy, b"{}", stream=subjects.HISTORY_STREAM, headers={"Nats-Msg-Id": "c-1"})
    again = await bus.js.publish(copy, b"{}", stream=subjects.HISTORY_STREAM, headers={"Nats-Msg-Id": "c-1"})
    assert again.duplicate and again.seq == first.seq
    assert (await bus.js.stream_info(subjects.HISTORY_STREAM)).state.messages == 1
