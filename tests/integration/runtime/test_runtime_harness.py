"""The service harness as a real process: ready over HTTP, then SIGTERM finishes work and exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import nats
import pytest
from nats.js.errors import KeyNotFoundError

from corral_bus.lease import LEASE_BUCKET, LeaseRecord
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually

DEMO = Path(__file__).with_name("harness_demo.py")
DEADLINE_S = 30.0


class DemoProcess:
    """harness_demo.py in a child process, its JSON log lines parsed as they arrive."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []

    async def line_where(self, event: str) -> dict[str, Any]:
        for line in self.lines:
            if line.get("event") == event:
                return line
        assert self.proc.stderr is not None
        async with asyncio.timeout(DEADLINE_S):
            while True:
                raw = await self.proc.stderr.readline()
                if not raw:
                    raise AssertionError(f"exited before logging {event!r}: {self.lines}")
                parsed: dict[str, Any] = json.loads(raw)
                self.lines.append(parsed)
                if parsed.get("event") == event:
                    return parsed

    async def rest(self) -> list[dict[str, Any]]:
        assert self.proc.stderr is not None
        async with asyncio.timeout(DEADLINE_S):
            remaining = await self.proc.stderr.read()
        self.lines.extend(json.loads(raw) for raw in remaining.splitlines() if raw.strip())
        return self.lines


async def start_demo(nats_url: str, instance: str, **env: str) -> DemoProcess:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DEMO),
        env={
            # Only what the test sets: a CORRAL_* variable of the shell (CI exports CORRAL_IMAGE)
            # would otherwise be one more unknown-variable warning in the service's log.
            **{name: value for name, value in os.environ.items() if not name.startswith("CORRAL_")},
            "CORRAL_NATS_URL": nats_url,
            "CORRAL_HEALTH_HOST": "127.0.0.1",
            "CORRAL_HEALTH_PORT": "0",
            "CORRAL_INSTANCE": instance,
            **env,
        },
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    return DemoProcess(proc)


async def wait_ready(port: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:

        async def ready() -> dict[str, Any] | None:
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                body: dict[str, Any] = await response.json()
                return body if response.status == 200 else None

        return await eventually(ready, within=DEADLINE_S, what="/readyz 200", interval=0.05)


@pytest.mark.integration
async def test_sigterm_finishes_in_flight_work_and_exits_zero(nats_server: NatsServer) -> None:
    instance = f"demo-{uuid.uuid4().hex[:8]}"
    observer = await nats.connect(nats_server.url)
    done = await observer.subscribe(f"corral.test.{instance}.done")
    demo = await start_demo(nats_server.url, instance)
    try:
        starting = await demo.line_where("service starting")
        assert starting["service"] == "demo" and starting["instance"] == instance
        ready = await wait_ready(int(starting["health_port"]))
        assert ready["conditions"] == {"bootstrap": True, "nats": True}

        demo.proc.send_signal(signal.SIGTERM)
        message = await done.next_msg(timeout=DEADLINE_S)
        assert message.data == b"finished"
        async with asyncio.timeout(DEADLINE_S):
            assert await demo.proc.wait() == 0
        events = [line["event"] for line in await demo.rest()]
        assert "stopping: finishing in-flight work" in events
        assert "service stopped" in events
    finally:
        if demo.proc.returncode is None:
            demo.proc.kill()
            await demo.proc.wait()
        await observer.close()


@pytest.mark.integration
async def test_bad_configuration_exits_2_naming_the_variable(nats_server: NatsServer) -> None:
    demo = await start_demo(nats_server.url, "demo-bad", CORRAL_HEALTH_PORT="http", CORRAL_FINISH_S="soon")
    async with asyncio.timeout(DEADLINE_S):
        code = await demo.proc.wait()
        assert demo.proc.stderr is not None
        text = (await demo.proc.stderr.read()).decode()
    assert code == 2
    assert "CORRAL_HEALTH_PORT='http'" in text
    assert "CORRAL_FINISH_S='soon'" in text


@pytest.mark.integration
async def test_a_misspelt_variable_is_a_warning_naming_the_setting() -> None:
    demo = await start_demo("nats://127.0.0.1:9", f"demo-{uuid.uuid4().hex[:8]}", CORRAL_SHUTDOWN_GRACE="5")
    try:
        warning = await demo.line_where("unknown configuration variable")
        assert warning["level"] == "warning"
        assert warning["problem"] == (
            "CORRAL_SHUTDOWN_GRACE is not a setting of this service: did you mean CORRAL_SHUTDOWN_GRACE_S?"
        )
    finally:
        demo.proc.kill()
        await demo.proc.wait()


@pytest.mark.integration
async def test_sigterm_before_nats_answers_still_exits_zero() -> None:
    # Port 9 (discard) on loopback refuses connections: the service keeps retrying until stopped.
    demo = await start_demo("nats://127.0.0.1:9", f"demo-{uuid.uuid4().hex[:8]}")
    try:
        await demo.line_where("service starting")
        demo.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(DEADLINE_S):
            assert await demo.proc.wait() == 0
        assert "stopped before NATS answered" in [line["event"] for line in await demo.rest()]
    finally:
        if demo.proc.returncode is None:
            demo.proc.kill()
            await demo.proc.wait()


async def lease_holder(nats_url: str, key: str) -> str | None:
    observer = await nats.connect(nats_url)
    try:
        kv = await observer.jetstream().key_value(LEASE_BUCKET)
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return None
        return msgspec.json.decode(entry.value or b"", type=LeaseRecord).holder
    finally:
        await observer.close()


@pytest.mark.integration
async def test_sigterm_releases_the_lease_so_the_standby_leads_before_the_ttl(
    nats_server: NatsServer,
) -> None:
    service = f"demo-{uuid.uuid4().hex[:8]}"
    ttl_s = 30.0  # far longer than the test waits: only a release can explain a quick takeover
    env = {"CORRAL_SERVICE": service, "CORRAL_LEADER": "true", "CORRAL_LEASE_TTL_S": str(ttl_s)}
    leader = await start_demo(nats_server.url, f"{service}-a", **env)
    standby: DemoProcess | None = None
    try:
        await leader.line_where("leadership gained")
        assert await lease_holder(nats_server.url, service) == f"{service}-a"
        standby = await start_demo(nats_server.url, f"{service}-b", **env)
        starting = await standby.line_where("service starting")
        await wait_ready(int(starting["health_port"]))
        assert await lease_holder(nats_server.url, service) == f"{service}-a"

        leader.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(DEADLINE_S):
            assert await leader.proc.wait() == 0
        assert "leadership lost" in [line["event"] for line in await leader.rest()]

        took_over_by = time.monotonic() + ttl_s / 2
        await standby.line_where("leadership gained")
        assert time.monotonic() < took_over_by
        assert await lease_holder(nats_server.url, service) == f"{service}-b"
    finally:
        for demo in (leader, standby):
            if demo is not None and demo.proc.returncode is None:
                demo.proc.kill()
                await demo.proc.wait()


@pytest.mark.integration
async def test_work_outliving_the_grace_period_is_cancelled(nats_server: NatsServer) -> None:
    demo = await start_demo(
        nats_server.url, f"demo-{uuid.uuid4().hex[:8]}", CORRAL_FINISH_S="600", CORRAL_SHUTDOWN_GRACE_S="0.2"
    )
    try:
        await demo.line_where("demo ready")
        demo.proc.send_signal(signal.SIGTERM)
        async with asyncio.timeout(DEADLINE_S):
            assert await demo.proc.wait() == 0
        assert "grace period over: cancelling in-flight work" in [line["event"] for line in await demo.rest()]
    finally:
        if demo.proc.returncode is None:
            demo.proc.kill()
            await demo.proc.wait()


@pytest.mark.integration
async def test_a_second_signal_stops_without_waiting(nats_server: NatsServer) -> None:
    demo = await start_demo(
        nats_server.url, f"demo-{uuid.uuid4().hex[:8]}", CORRAL_FINISH_S="600", CORRAL_SHUTDOWN_GRACE_S="600"
    )
    try:
        await demo.line_where("demo ready")
        demo.proc.send_signal(signal.SIGTERM)
        await demo.line_where("demo finishing in-flight work")
        demo.proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(DEADLINE_S):
            assert await demo.proc.wait() == 130
    finally:
        if demo.proc.returncode is None:
            demo.proc.kill()
            await demo.proc.wait()


@pytest.mark.integration
async def test_stream_replicas_reach_jetstream(nats_server: NatsServer) -> None:
    """CORRAL_NATS_REPLICAS is what the harness asks JetStream for: three replicas on a single
    server is refused by the server itself, and the service says so and does not start."""
    demo = await start_demo(nats_server.url, "demo-r3", CORRAL_NATS_REPLICAS="3")
    async with asyncio.timeout(DEADLINE_S):
        code = await demo.proc.wait()
    lines = await demo.rest()
    assert code != 0
    failure = next(line for line in lines if line.get("event") == "service could not start")
    assert "replicas" in json.dumps(failure).lower(), failure
