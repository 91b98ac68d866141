"""`corral events dump` and `corral replay engine-upgrade` on a real wave: the sandbox cluster, a real
NATS server and the watcher, actuator and engine-upgrade services in this event loop (the engine-
upgrade scenarios' stack). A new engine image is created, deployed and made the default, the wave
runs to its end, the bus is dumped (or read straight from its history, LH_HISTORY), and the replay
must make exactly the commands the live service made (by command id), and explain why the degraded
volume was never upgraded.

`CORRAL_RECORD_BUNDLE=tests/data/replay/engine-upgrade-wave.jsonl` keeps the dumped bundle: that is
how the bundle the unit tests replay (tests/unit/decision/test_replay_bundle.py) was made.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from corral_bus import Bus
from corral_cli.main import main
from corral_decision.bundle import Line, parse_time, read_bundle
from corral_model import codec
from corral_model.envelopes import CommandResult, Outcome
from corral_model.subjects import COMMANDS_STREAM, HISTORY_STREAM, OBJECTS_STREAM, RESULTS_STREAM
from corral_model.version import VERSION_HEADER, corral_version
from corral_sandbox.simulator import SimConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import Running, actuator, engine_upgrade, watcher
from tests.scenarios.engine_upgrade.scenario import DEFAULT_SETTING, LIMIT_SETTING

pytestmark = pytest.mark.integration

NEW_IMAGE = "longhornio/longhorn-engine:v1.11.0"
ATTACHED = {
    "vol-a1": "node-1",
    "vol-a2": "node-1",
    "vol-a3": "node-1",
    "vol-b1": "node-2",
    "vol-b2": "node-2",
}
DETACHED = ["vol-c1", "vol-c2"]
DEGRADED = "vol-d"


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(live_upgrade_seconds=0.3, engine_image_deploy_seconds=0.2)


@pytest.fixture
async def stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    services = [watcher(kubeconfig, nats_server.url), actuator(kubeconfig, nats_server.url)]
    services.append(engine_upgrade(nats_server.url))
    try:
        await eventually(lambda: all(s.ready for s in services), within=120, what="services ready")
        yield services
    finally:
        for service in reversed(services):
            await service.stop()


async def _volume_is(sandbox: Sandbox, name: str, test: Any) -> bool:
    return bool(test(await sandbox.get("volumes", name)))


def _status(volume: dict[str, Any]) -> dict[str, Any]:
    status: dict[str, Any] = volume.get("status", {})
    return status


async def _results(bus: Bus) -> list[CommandResult]:
    """Every engine-upgrade result on LH_RESULTS (by message get: nothing consumed), but for the
    volume Events it reports (lh.res.engine-upgrade.event.…): those are no decisions."""
    found: list[CommandResult] = []
    info = await bus.js.stream_info(RESULTS_STREAM)
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        message = await bus.js.get_msg(RESULTS_STREAM, seq)
        subject = message.subject or ""
        if subject.startswith("lh.res.engine-upgrade.") and not subject.startswith(
            "lh.res.engine-upgrade.event."
        ):
            found.append(codec.decode(message.data or b"", CommandResult))
    return found


async def run_wave(sandbox: Sandbox, bus: Bus) -> list[CommandResult]:
    """Volumes on the default image, one degraded; then a new engine image becomes the default and
    the wave runs until every healthy volume is on it. Returns the service's results."""
    await sandbox.set_setting(LIMIT_SETTING, "1")
    for name, node in ATTACHED.items():
        await sandbox.create_volume(name, replicas=2, node=node)
    for name in DETACHED:
        await sandbox.create_volume(name, replicas=2)
    await sandbox.create_volume(DEGRADED, replicas=3, node="node-2")
    for name in [*ATTACHED, DEGRADED]:
        await sandbox.wait_volume(name, lambda v: _status(v).get("robustness") == "healthy", within=30)
    await sandbox.patch("volumes", DEGRADED, {"spec": {"numberOfReplicas": 4}})  # 4 replicas on 3 nodes
    await sandbox.wait_volume(DEGRADED, lambda v: _status(v).get("robustness") == "degraded", within=30)

    await sandbox.create_engine_image(NEW_IMAGE)
    await sandbox.wait_for(lambda: _deployed(sandbox), within=30, what=f"{NEW_IMAGE} deployed on every node")
    await sandbox.set_setting(DEFAULT_SETTING, NEW_IMAGE)
    upgraded = [*ATTACHED, *DETACHED]
    for name in upgraded:
        await sandbox.wait_volume(
            name,
            lambda v: v["spec"].get("image") == NEW_IMAGE and _status(v).get("currentImage") == NEW_IMAGE,
            within=60,
            what=f"{name} on {NEW_IMAGE}",
        )

    async def all_reported() -> list[CommandResult] | None:
        results = await _results(bus)
        applied = {r.target.name for r in results if r.outcome is Outcome.APPLIED}
        return results if applied >= set(upgraded) else None

    return await eventually(all_reported, within=30, what="an applied result for every upgraded volume")


async def history_caught_up(bus: Bus) -> bool:
    """JetStream copies into LH_HISTORY a moment after each message is stored: none is pending."""
    info = await bus.js.stream_info(HISTORY_STREAM)
    return all(source.lag == 0 and (source.active or 0) >= 0 for source in info.sources or [])


async def _deployed(sandbox: Sandbox) -> bool:
    ei: dict[str, Any] = await sandbox.engine_image(NEW_IMAGE)
    return bool(ei.get("status", {}).get("state") == "deployed")


async def corral(*argv: str) -> int:
    """The `corral` command in this process (its own event loop, in a thread)."""
    return await asyncio.to_thread(main, list(argv))


def replayed_ids(out: str) -> set[str]:
    return {line.split()[1] for line in out.splitlines() if line.startswith("command ")}


async def test_a_recorded_wave_replays_to_the_same_commands(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer, stack: list[Running], tmp_path: Path, capsys: Any
) -> None:
    """`corral events dump --follow`, started before the wave and interrupted after it, records all
    of it (the commands whole, from core NATS); the replay makes exactly the live service's
    commands. A dump taken after the wave (in this process, through the CLI's main) reads the bus's
    history, which kept every event, command and result (where LH_OBJECTS keeps 5 events per object
    and rolls a deleted one's up, and the actuator drained LH_COMMANDS): it replays the same and
    still explains the degraded volume."""
    bundle = tmp_path / "wave.jsonl"
    recorder = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("corral")),
        *("events", "dump", "--follow", "--nats", nats_server.url, "--output", str(bundle)),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert recorder.stderr is not None
        ready = await asyncio.wait_for(recorder.stderr.readline(), 30)
        assert b"recording new messages" in ready, ready
        results = await run_wave(sandbox, bus)
        live_ids = {r.command_id for r in results}
        assert len(live_ids) == len(ATTACHED) + len(DETACHED)

        def recorded() -> bool:
            """A command line and a result line for every command the live service made."""
            seen = set()
            for line in read_bundle(bundle.read_bytes().splitlines(keepends=True)):
                if isinstance(line, Line) and line.entry.stream in (COMMANDS_STREAM, RESULTS_STREAM):
                    document = json.loads(line.entry.data)
                    seen.add((line.entry.stream, document.get("id") or document.get("commandId")))
            return seen >= {(s, id_) for s in (COMMANDS_STREAM, RESULTS_STREAM) for id_ in live_ids}

        await eventually(recorded, within=30, what="every command and result in the live bundle")
    finally:
        if recorder.returncode is None:
            recorder.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(recorder.wait(), 30) == 0
    if os.environ.get("CORRAL_RECORD_BUNDLE"):
        shutil.copyfile(bundle, os.environ["CORRAL_RECORD_BUNDLE"])

    lines = list(read_bundle(bundle.read_bytes().splitlines(keepends=True)))
    entries = [line.entry for line in lines if isinstance(line, Line)]
    assert len(entries) == len(lines), "the dump wrote a line it cannot read back"
    live_commands = [e for e in entries if e.stream == COMMANDS_STREAM]
    reports = [e for e in live_commands if e.subject.startswith("lh.cmd.engine-upgrade.event.")]
    assert reports, "the volume Events the service reported are recorded too"
    decisions = [e for e in live_commands if e not in reports]
    assert {e.seq for e in live_commands} == {0} and len(decisions) == len(live_ids)
    # Which corral made them travels with each command and result (a replay names another release).
    made_by = {
        e.headers.get(VERSION_HEADER) for e in entries if e.stream in (COMMANDS_STREAM, RESULTS_STREAM)
    }
    assert made_by == {corral_version()}

    capsys.readouterr()
    assert await corral("replay", "engine-upgrade", str(bundle)) == 0
    out = capsys.readouterr().out
    assert replayed_ids(out) == live_ids, out
    assert f"diff: {len(live_ids)} same, 0 changed, 0 missing, 0 extra" in out, out
    assert "history cut" not in out, out

    # Afterwards, with no recorder: the bus's own history holds the whole wave, commands included
    # (the actuator drained LH_COMMANDS long ago), so a dump taken now replays just as well.
    after = tmp_path / "after.jsonl"
    assert await corral("events", "dump", "--nats", nats_server.url, "--output", str(after)) == 0
    after_entries = [line.entry for line in read_bundle(after.open("rb")) if isinstance(line, Line)]
    keys = [(parse_time(e.time), e.stream, e.seq) for e in after_entries]
    assert keys == sorted(keys), "a dump is in stream-time order"
    assert {e.stream for e in after_entries} == {OBJECTS_STREAM, COMMANDS_STREAM, RESULTS_STREAM}
    capsys.readouterr()
    assert await corral("replay", "engine-upgrade", str(after)) == 0
    out = capsys.readouterr().out
    assert replayed_ids(out) == live_ids, out
    assert "history cut" not in out, out
    key = f"Volume/longhorn-system/{DEGRADED}"
    capsys.readouterr()
    await corral("replay", "engine-upgrade", str(after), "--explain", key)
    out = capsys.readouterr().out
    explained = out.split(f"explain {key}\n", 1)[1].splitlines()
    assert explained[-1].endswith(": degraded group node-2"), out
    assert any(f"lh.obj.volume.longhorn-system.{DEGRADED}" in line and " *: " in line for line in explained)


async def test_the_history_replays_a_wave_no_one_recorded(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer, stack: list[Running], tmp_path: Path, capsys: Any
) -> None:
    """No recorder: `corral replay --nats … --since <before the wave>` rebuilds the view from
    LH_HISTORY and makes exactly the live service's commands; `--until` before the wave compares
    nothing; `--explain` gives one volume's trail: its events, the command the replay made, the
    command as recorded and its result, each with the verdict after it."""
    from corral_cli.commands.events import parse_moment

    before = parse_moment("0s")
    results = await run_wave(sandbox, bus)
    live_ids = {r.command_id for r in results}
    await eventually(lambda: history_caught_up(bus), within=10, what="LH_HISTORY caught up with its sources")
    capsys.readouterr()
    status = await corral("replay", "engine-upgrade", "--nats", nats_server.url, "--since", str(before / 1e9))
    out = capsys.readouterr().out
    assert status == 0, out
    assert replayed_ids(out) == live_ids, out
    assert f"diff: {len(live_ids)} same, 0 changed, 0 missing, 0 extra" in out, out
    assert "version:" not in out and "limit: the window starts" not in out, out
    # The same window dumped as a bundle replays to the same bytes, exit code included.
    bundle = tmp_path / "window.jsonl"
    since = str(before / 1e9)
    assert await corral("events", "dump", "--nats", nats_server.url, "--since", since, "-o", str(bundle)) == 0
    capsys.readouterr()
    assert await corral("replay", "engine-upgrade", str(bundle), "--since", since) == status
    assert capsys.readouterr().out == out
    # From the middle of the wave: the view, the commands in flight and their results as of then
    # come from the context before it, and the rest of the wave is decided as the live service did.
    commands = [
        line.entry
        for line in read_bundle(bundle.open("rb"))
        if isinstance(line, Line)
        and line.entry.stream == COMMANDS_STREAM
        and "event." not in line.entry.subject
    ]
    middle = commands[len(commands) // 2].time
    status = await corral("replay", "engine-upgrade", "--nats", nats_server.url, "--since", middle)
    out = capsys.readouterr().out
    in_window = len({c.headers["Nats-Msg-Id"] for c in commands if c.time >= middle})
    assert status == 0 and f"diff: {in_window} same, 0 changed, 0 missing, 0 extra" in out, out

    status = await corral(
        "replay",
        "engine-upgrade",
        "--nats",
        nats_server.url,
        "--since",
        str(before / 1e9),
        "--until",
        str(before / 1e9 + 0.001),
    )
    out = capsys.readouterr().out
    assert status == 0 and "diff: 0 same, 0 changed, 0 missing, 0 extra" in out, out

    key = "Volume/longhorn-system/vol-a1"
    await corral(
        "replay", "engine-upgrade", "--nats", nats_server.url, "--since", str(before / 1e9), "--explain", key
    )
    out = capsys.readouterr().out
    trail = out.split(f"explain {key}\n", 1)[1].splitlines()
    assert any(
        "lh.obj.volume.longhorn-system.vol-a1" in line and "[MODIFIED Volume" in line for line in trail
    ), out
    assert any(
        "lh.cmd.engine-upgrade.volume.longhorn-system.vol-a1" in line and " *: " in line for line in trail
    ), out
    assert any(
        "lh.res.engine-upgrade.volume.longhorn-system.vol-a1" in line and "[applied Volume" in line
        for line in trail
    ), out
    assert any("; commanded engine-upgrade-" in line for line in trail), out
