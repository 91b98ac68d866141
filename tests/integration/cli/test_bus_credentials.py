"""Every CLI command that reads the bus takes the same credentials, and works on a locked-down NATS
as its read-only user; without them, or with wrong ones, it says so once and stops, instead of
retrying until its timeout and printing the server's refusal each time."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from corral_bus import Bus
from corral_bus.permissions import READER
from corral_cli.commands.events import CONNECT_TIMEOUT_S
from tests.fixtures.nats import NatsServer
from tests.integration.cli.test_events_command import corral, stream_counts, wave_cluster
from tests.integration.cli.test_progress_command import publish

pytestmark = pytest.mark.integration


def _reader(server: NatsServer) -> list[str]:
    return ["--nats-user", READER, "--nats-password", server.users[READER]]


async def test_replay_reads_the_locked_down_bus_as_the_reader(
    secure_nats: NatsServer, secure_bus: Bus, capsys: Any
) -> None:
    await publish(secure_bus, wave_cluster())
    before = await stream_counts(secure_bus)
    capsys.readouterr()
    argv = ["replay", "engine-upgrade", "--nats", secure_nats.url, *_reader(secure_nats), "--from-seq", "1"]
    status = await corral(*argv)
    out = capsys.readouterr().out
    assert status == 1, out  # it read the wave: the replay starts upgrades nobody recorded
    assert "diff: 0 same, 0 changed, 0 missing, 2 extra" in out, out
    assert await stream_counts(secure_bus) == before


@pytest.mark.parametrize(
    "command",
    [
        ["events", "dump"],
        ["progress", "engine-upgrade"],
        ["replay", "engine-upgrade", "--from-seq", "1"],
    ],
)
@pytest.mark.parametrize("credentials", ["none", "wrong"])
async def test_a_refusal_is_said_once_and_not_retried(
    secure_nats: NatsServer,
    secure_bus: Bus,
    command: list[str],
    credentials: str,
    capsys: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    extra = [] if credentials == "none" else ["--nats-user", READER, "--nats-password", "not-it"]
    caplog.set_level(logging.WARNING)
    capsys.readouterr()
    started = time.monotonic()
    status = await corral(*command, "--nats", secure_nats.url, *extra)
    took = time.monotonic() - started
    err = capsys.readouterr().err
    assert status in (1, 2), err
    refused = [line for line in err.splitlines() if "refused" in line]
    assert len(refused) == 1, err
    who = "no credentials" if credentials == "none" else f"user '{READER}'"
    assert f"refused {who}" in refused[0] and "--nats-user reader" in refused[0], refused[0]
    assert "authorization violation" in refused[0].lower()
    logged = [r for r in caplog.records if "authorization violation" in r.getMessage().lower()]
    assert logged == [], [r.getMessage() for r in logged]
    assert took < CONNECT_TIMEOUT_S, f"it waited {took:.1f} s: it retried instead of stopping"
