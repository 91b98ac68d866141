"""`corral events dump` and `corral events tail` against a real NATS server: they read every stream,
in order, and change nothing (LH_COMMANDS is a work queue: a command read by them is still there for
the actuator)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from corral_bus import Bus
from corral_cli.main import main
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING
from corral_model import codec
from corral_model.envelopes import Command, FieldValue, Outcome, Target, Verb, new_command
from corral_model.subjects import (
    COMMANDS_STREAM,
    HISTORY_STREAM,
    OBJECTS_STREAM,
    RESULTS_STREAM,
    command_stream,
)
from tests.fixtures.nats import NatsServer, queued_commands
from tests.fixtures.processes import eventually
from tests.integration.cli.test_progress_command import publish
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NODES,
    OLD,
    engine_image,
    longhorn_node,
    result,
    setting,
    volume,
)
from tests.unit.engine_upgrade.test_progress_model import Events, with_replicas

pytestmark = pytest.mark.integration
DEADLINE_S = 30.0
CORRAL = str(Path(sys.executable).with_name("corral"))
TARGET = Target(kind="Volume", namespace="longhorn-system", name="a")


def wave_cluster() -> list[Any]:
    """A cluster where engine-upgrade would start a wave: a on n1, b on n2, limit 1."""
    events = Events()
    make = events.event
    cluster = [make(longhorn_node(n)) for n in NODES]
    cluster += [make(engine_image(OLD, api=5)), make(engine_image(NEW))]
    cluster += [make(setting(DEFAULT_IMAGE_SETTING, NEW)), make(setting(LIMIT_SETTING, "1"))]
    for obj in (*with_replicas(volume("a")), *with_replicas(volume("b", owner="n2"))):
        cluster.append(make(obj))
    return [*cluster, *events.resync()]


async def corral(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))


async def stream_counts(bus: Bus) -> dict[str, int]:
    counts = {s: (await bus.js.stream_info(s)).state.messages for s in (OBJECTS_STREAM, RESULTS_STREAM)}
    return {**counts, COMMANDS_STREAM: await queued_commands(bus)}


async def test_dump_reads_every_stream_in_order_and_consumes_nothing(
    bus: Bus, nats_server: NatsServer, tmp_path: Path
) -> None:
    await publish(bus, wave_cluster())
    command = Command(id="engine-upgrade-x", service="engine-upgrade", verb=Verb.PATCH, target=TARGET)
    await bus.js.publish(
        "lh.cmd.engine-upgrade.volume.longhorn-system.a",
        codec.encode(command),
        headers={"Nats-Msg-Id": command.id},
    )
    await bus.js.publish(
        "lh.res.engine-upgrade.volume.longhorn-system.a", codec.encode(result(command, Outcome.APPLIED))
    )
    await bus.js.publish("lh.obj.volume.longhorn-system.binary", b"\x00\x01 not json")
    before = await stream_counts(bus)

    async def all_in_history() -> bool:
        # JetStream copies into LH_HISTORY a moment after each message is stored.
        return (await bus.js.stream_info(HISTORY_STREAM)).state.messages == sum(before.values())

    await eventually(all_in_history, within=10, what="every message copied into LH_HISTORY")
    bundle = tmp_path / "bus.jsonl"
    assert await corral("events", "dump", "--nats", nats_server.url, "-o", str(bundle)) == 0
    records = [json.loads(line) for line in bundle.read_text().splitlines()]
    assert len(records) == sum(before.values())
    assert [r["stream"] for r in records[-3:]] == [COMMANDS_STREAM, RESULTS_STREAM, OBJECTS_STREAM]
    assert (
        records[-3]["payload"]["id"] == "engine-upgrade-x"
        and records[-3]["headers"]["Nats-Msg-Id"] == "engine-upgrade-x"
    )
    assert records[-1]["base64"] is True and "base64" not in records[0]
    times = [r["time"] for r in records]
    assert times == sorted(times)  # RFC 3339 with nanoseconds, one zone: sorts as text
    assert await stream_counts(bus) == before, "the dump consumed something"
    consumers = await bus.js.consumers_info(command_stream("engine-upgrade"))
    # Only JetStream's own, which copies every command into LH_HISTORY (and acks nothing).
    assert [c.name for c in consumers if not (c.name or "").startswith("JS_SRC_")] == []

    only_results = tmp_path / "results.jsonl"
    assert (
        await corral(
            "events", "dump", "--nats", nats_server.url, "-o", str(only_results), "--subjects", "lh.res.>"
        )
        == 0
    )
    assert [json.loads(line)["stream"] for line in only_results.read_text().splitlines()] == [RESULTS_STREAM]

    # The streams as they are now (no history): from a time on is from that time on.
    streams = tmp_path / "streams.jsonl"
    assert await corral("events", "dump", "--nats", nats_server.url, "-o", str(streams), "--no-history") == 0
    now = [json.loads(line) for line in streams.read_text().splitlines()]
    assert len(now) == len(records) and [r["stream"] for r in now[-3:]] == [r["stream"] for r in records[-3:]]
    since = tmp_path / "since.jsonl"
    command_time = now[-3]["time"]
    dump_since = ("events", "dump", "--nats", nats_server.url, "-o", str(since), "--since", command_time)
    assert await corral(*dump_since, "--no-history") == 0
    assert [json.loads(line) for line in since.read_text().splitlines()] == now[-3:]
    # From the history, the window comes after the context that rebuilds the view as of its start:
    # here, everything (all of it is from the last moments before it).
    assert await corral(*dump_since) == 0
    assert [json.loads(line) for line in since.read_text().splitlines()] == records

    late = tmp_path / "late.jsonl"
    last_object = max(r["seq"] for r in records if r["stream"] == OBJECTS_STREAM)
    assert (
        await corral(
            "events", "dump", "--nats", nats_server.url, "-o", str(late), "--from-seq", str(last_object)
        )
        == 0
    )
    assert [json.loads(line)["seq"] for line in late.read_text().splitlines()] == [last_object]


async def test_tail_prints_a_line_per_live_message(bus: Bus, nats_server: NatsServer) -> None:
    proc = await asyncio.create_subprocess_exec(
        CORRAL,
        *("events", "tail", "--nats", nats_server.url, "--count", "3"),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None and proc.stdout is not None
        ready = await asyncio.wait_for(proc.stderr.readline(), DEADLINE_S)
        assert b"following lh.obj.> lh.cmd.> lh.res.>" in ready, ready
        vol = volume("a")
        events = Events()
        await publish(bus, [events.event(vol)])
        command = new_command(
            service="engine-upgrade",
            verb=Verb.PATCH,
            target=TARGET,
            changes=(FieldValue(path="/spec/image", value=NEW),),
        )
        await bus.js.publish("lh.cmd.engine-upgrade.volume.longhorn-system.a", codec.encode(command))
        await bus.js.publish(
            "lh.res.engine-upgrade.volume.longhorn-system.a", codec.encode(result(command, Outcome.APPLIED))
        )
        deadline = time.monotonic() + DEADLINE_S
        lines = []
        for _ in range(3):
            line = await asyncio.wait_for(proc.stdout.readline(), max(0.1, deadline - time.monotonic()))
            lines.append(line.decode())
        assert await asyncio.wait_for(proc.wait(), DEADLINE_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    by_stream = {line.split()[1]: line for line in lines}
    assert set(by_stream) == {OBJECTS_STREAM, COMMANDS_STREAM, RESULTS_STREAM}, lines
    assert (
        " lh.obj.volume.longhorn-system.a MODIFIED Volume longhorn-system/a rv 1" in by_stream[OBJECTS_STREAM]
    )
    assert f"patch Volume longhorn-system/a /spec/image={NEW} id {command.id}" in by_stream[COMMANDS_STREAM]
    assert f"applied Volume longhorn-system/a id {command.id}" in by_stream[RESULTS_STREAM]
    assert await queued_commands(bus) == 1  # tail took nothing away
