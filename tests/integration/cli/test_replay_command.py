"""`corral replay --nats`: the replay reads a live bus (read-only) as it reads a bundle."""

from __future__ import annotations

from typing import Any

import pytest

from corral_bus import Bus, StreamSettings, ensure_streams
from corral_model.subjects import HISTORY_STREAM
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.integration.cli.test_events_command import corral, stream_counts, wave_cluster
from tests.integration.cli.test_progress_command import publish

pytestmark = pytest.mark.integration


async def test_replay_reads_a_live_bus_without_publishing(
    bus: Bus, nats_server: NatsServer, capsys: Any
) -> None:
    await publish(bus, wave_cluster())
    before = await stream_counts(bus)
    capsys.readouterr()
    status = await corral("replay", "engine-upgrade", "--nats", nats_server.url, "--from-seq", "1")
    out = capsys.readouterr().out
    assert status == 1, out  # the replay would start a wave that nobody recorded
    assert "diff: 0 same, 0 changed, 0 missing, 2 extra" in out, out
    assert {line.split()[2] for line in out.splitlines() if line.startswith("command ")} == {
        "Volume/longhorn-system/a",
        "Volume/longhorn-system/b",
    }
    assert await stream_counts(bus) == before, "replay published something"


async def test_a_window_older_than_the_history_is_named_with_what_it_cannot_replay(
    bus: Bus, nats_server: NatsServer, capsys: Any
) -> None:
    """The history shrunk to a few messages (its size limit): a replay from before it says where the
    history begins, that older messages expired, and which objects' view comes from LH_OBJECTS."""
    cluster = wave_cluster()
    await publish(bus, cluster)

    async def recorded() -> bool:
        info = await bus.js.stream_info(HISTORY_STREAM)
        return info.state.messages == len(cluster)

    await eventually(recorded, within=10, what="the cluster in LH_HISTORY")
    await ensure_streams(bus.js, StreamSettings(history_max_bytes=3000))
    info = await bus.js.stream_info(HISTORY_STREAM)
    assert info.state.first_seq > 1
    capsys.readouterr()
    status = await corral("replay", "engine-upgrade", "--nats", nats_server.url, "--since", "1")
    out = capsys.readouterr().out
    limits = [line for line in out.splitlines() if line.startswith("limit: ")]
    assert limits[0].startswith(
        "limit: the window starts at 1970-01-01T00:00:01.000000000Z, before the history"
    ), out
    assert "older messages expired (its max age or size)" in limits[0], out
    assert limits[1].endswith(
        "did not change during the history: their view starts from their latest event in LH_OBJECTS"
    ), out
    assert status == 1, out  # the wave nobody recorded is still decided, from the rebuilt view
