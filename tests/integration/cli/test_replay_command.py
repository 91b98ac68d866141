"""`corral replay --nats`: the replay reads a live bus (read-only) as it reads a bundle."""

from __future__ import annotations

from typing import Any

import pytest

from corral_bus import Bus
from tests.fixtures.nats import NatsServer
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
