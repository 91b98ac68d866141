"""Stream set-up at start-up: idempotent, updates what may change, refuses what may not."""

from __future__ import annotations

import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from corral_bus import Bus, StreamConfigError, StreamSettings, ensure_streams
from corral_bus.setup import prepare_bus
from corral_bus.streams import check_streams, differences, stream_configs
from corral_model import subjects
from tests.fixtures.nats import NatsServer
from tests.fixtures.secure_nats import connect_as

pytestmark = pytest.mark.integration


async def test_ensure_streams_is_idempotent_and_updates(bus: Bus) -> None:
    await ensure_streams(bus.js)  # the fixture already made them: nothing changes, nothing fails
    await ensure_streams(bus.js, StreamSettings(objects_history=9))
    objects = await bus.js.stream_info(subjects.OBJECTS_STREAM)
    assert objects.config.max_msgs_per_subject == 9
    assert objects.config.allow_msg_ttl
    for service in subjects.COMMAND_SENDERS:
        commands = await bus.js.stream_info(subjects.command_stream(service))
        assert commands.config.retention == RetentionPolicy.WORK_QUEUE
        assert commands.config.subjects == [f"lh.cmd.{service}.>"]


async def test_a_stream_that_cannot_be_fixed_is_refused_loudly(bus: Bus) -> None:
    stream = subjects.command_stream("im-restart")
    await bus.js.delete_stream(stream)
    await bus.js.add_stream(
        StreamConfig(name=stream, subjects=["lh.cmd.im-restart.>"], retention=RetentionPolicy.LIMITS)
    )
    with pytest.raises(StreamConfigError, match=stream):
        await ensure_streams(bus.js)


async def test_the_shared_command_stream_of_an_earlier_release_is_retired(bus: Bus) -> None:
    """Before each sender had a command stream, one LH_COMMANDS took `lh.cmd.>`: its subjects
    overlap every new stream's, so the setup step deletes it (its queued commands are issued again
    by their senders) and makes the new ones."""
    for info in await bus.js.streams_info():  # the toy decider's of the test fixture too
        if (info.config.name or "").startswith(subjects.COMMANDS_STREAM):
            await bus.js.delete_stream(info.config.name or "")
    await bus.js.add_stream(
        StreamConfig(
            name=subjects.COMMANDS_STREAM, subjects=["lh.cmd.>"], retention=RetentionPolicy.WORK_QUEUE
        )
    )
    await bus.js.publish("lh.cmd.engine-upgrade.volume.longhorn-system.pvc-1", b"{}")
    with pytest.raises(StreamConfigError):  # a service's start-up check cannot make them beside it
        await check_streams(bus.js)
    await ensure_streams(bus.js)
    names = {info.config.name for info in await bus.js.streams_info()}
    assert subjects.COMMANDS_STREAM not in names
    assert set(subjects.COMMAND_STREAMS) <= names


async def _objects_as_made_before(bus: Bus) -> None:
    """LH_OBJECTS as the contract made it before rollups, purges and deletes were refused."""
    objects = stream_configs()[0]
    assert objects.name == subjects.OBJECTS_STREAM
    await bus.js.delete_stream(subjects.OBJECTS_STREAM)
    old = StreamConfig(
        name=objects.name,
        subjects=objects.subjects,
        max_msgs_per_subject=objects.max_msgs_per_subject,
        duplicate_window=objects.duplicate_window,
        allow_rollup_hdrs=True,
        allow_msg_ttl=True,
        allow_direct=True,
    )
    await bus.js.add_stream(old)


async def test_an_lh_objects_made_before_is_locked_by_the_start_up_check(bus: Bus) -> None:
    """A deployment whose LH_OBJECTS still allows rollups, purges and deletes is found differing and
    updated (by `corral bus init`, or here, where the server is open, by the check itself)."""
    objects = stream_configs()[0]
    await _objects_as_made_before(bus)
    found = differences(objects, (await bus.js.stream_info(subjects.OBJECTS_STREAM)).config)
    assert [d.split()[0] for d in found] == ["allow_rollup_hdrs", "deny_delete", "deny_purge"]
    await check_streams(bus.js)
    now = (await bus.js.stream_info(subjects.OBJECTS_STREAM)).config
    assert now.allow_rollup_hdrs is False and now.deny_delete and now.deny_purge
    assert differences(objects, now) == []


async def test_on_a_locked_down_bus_the_setup_step_locks_lh_objects(
    secure_nats: NatsServer, secure_bus: Bus
) -> None:
    """Where the watcher may not change streams, it refuses to start on the old LH_OBJECTS and names
    the setup step; `corral bus init` (prepare_bus, as the admin) updates the stream in place."""
    await _objects_as_made_before(secure_bus)
    watcher = await connect_as(secure_nats, "watcher")
    try:
        with pytest.raises(StreamConfigError, match="corral bus init"):
            await check_streams(watcher.js)
        await prepare_bus(secure_bus)
        await check_streams(watcher.js)  # as the contract says now: nothing to change
    finally:
        await watcher.close()
    now = (await secure_bus.js.stream_info(subjects.OBJECTS_STREAM)).config
    assert now.allow_rollup_hdrs is False and now.deny_delete and now.deny_purge
