"""Stream set-up at start-up: idempotent, updates what may change, refuses what may not."""

from __future__ import annotations

import pytest
from nats.js.api import RetentionPolicy, StreamConfig

from corral_bus import Bus, StreamConfigError, StreamSettings, ensure_streams
from corral_model import subjects

pytestmark = pytest.mark.integration


async def test_ensure_streams_is_idempotent_and_updates(bus: Bus) -> None:
    await ensure_streams(bus.js)  # the fixture already made them: nothing changes, nothing fails
    await ensure_streams(bus.js, StreamSettings(objects_history=9))
    objects = await bus.js.stream_info(subjects.OBJECTS_STREAM)
    assert objects.config.max_msgs_per_subject == 9
    assert objects.config.allow_msg_ttl
    commands = await bus.js.stream_info(subjects.COMMANDS_STREAM)
    assert commands.config.retention == RetentionPolicy.WORK_QUEUE


async def test_a_stream_that_cannot_be_fixed_is_refused_loudly(bus: Bus) -> None:
    await bus.js.delete_stream(subjects.COMMANDS_STREAM)
    await bus.js.add_stream(
        StreamConfig(name=subjects.COMMANDS_STREAM, subjects=["lh.cmd.>"], retention=RetentionPolicy.LIMITS)
    )
    with pytest.raises(StreamConfigError, match="LH_COMMANDS"):
        await ensure_streams(bus.js)
