"""`corral progress engine-upgrade` as an operator runs it, against a real NATS server: it follows
LH_OBJECTS (here fed with the events a watcher would publish), prints a line per node whenever its
figures change (stdout is a pipe), and exits 0 with a summary once the wave is over."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from corral_bus import Bus, connect
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING
from corral_model import codec
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.subjects import object_subject, resync_subject
from tests.fixtures.nats import NatsServer, reset_jetstream
from tests.unit.engine_upgrade.cluster import (
    NEW,
    NODES,
    OLD,
    engine_image,
    longhorn_node,
    setting,
    upgraded,
    volume,
)
from tests.unit.engine_upgrade.test_progress_model import Events, with_replicas

pytestmark = pytest.mark.integration
DEADLINE_S = 60.0
IN_FLIGHT = re.compile(r"^\s*[\d.]+s (\S+)\s+limit (\d+)  in flight (\d+)  done (\d+)  waiting (\d+)")


async def publish(bus: Bus, events: list[ObjectEvent[Any]]) -> None:
    for event in events:
        if event.type is EventType.RESYNCED:
            subject = resync_subject(event.kind, event.namespace)
        else:
            subject = object_subject(event.kind, event.namespace, event.name)
        await bus.js.publish(subject, codec.encode(event))


class Lines:
    """The command's stdout, line by line, with a deadline on every wait."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.seen: list[str] = []

    async def until(self, pattern: str) -> str:
        deadline = time.monotonic() + DEADLINE_S
        assert self.proc.stdout is not None
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"never printed {pattern!r}; printed:\n" + "".join(self.seen)
            line = (await asyncio.wait_for(self.proc.stdout.readline(), left)).decode()
            assert line, f"exited before printing {pattern!r}:\n" + "".join(self.seen)
            self.seen.append(line)
            if re.search(pattern, line):
                return line


@contextlib.asynccontextmanager
async def followed_progress(service: str, nats_url: str) -> AsyncIterator[Lines]:
    """`corral progress SERVICE --nats URL` as an operator runs it (stdout a pipe, stderr merged into
    it), read line by line; killed on the way out if it has not exited by itself."""
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("corral")),
        *("progress", service, "--nats", nats_url),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        yield Lines(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_the_wave_line_by_line_until_it_is_over(bus: Bus, nats_server: NatsServer) -> None:
    events = Events()
    make = events.event
    cluster = [make(longhorn_node(n)) for n in NODES]
    cluster += [make(engine_image(OLD, api=5)), make(engine_image(NEW))]
    cluster += [make(setting(DEFAULT_IMAGE_SETTING, NEW)), make(setting(LIMIT_SETTING, "1"))]
    a, b = volume("a", image=NEW, current=OLD), volume("b")
    cluster += [make(obj) for obj in (*with_replicas(a), *with_replicas(b))]
    cluster += [make(obj) for obj in with_replicas(volume("c", owner="n2", robustness="degraded"))]
    await publish(bus, [*cluster, *events.resync()])

    async with followed_progress("engine-upgrade", nats_server.url) as lines:
        await lines.until(rf"default image {re.escape(NEW)}, limit 1 per owner node")
        await lines.until(r" n1 +limit 1  in flight 1  done 0  waiting 1  blocked 0$")
        await lines.until(r" n2 +limit 1  in flight 0  done 0  waiting 0  blocked 1 \(degraded 1\)$")
        await lines.until(r" total +limit 1  in flight 1  done 0  waiting 1  blocked 1 \(degraded 1\)$")
        # the service's work, as the watcher would report it: a finishes, b starts, b finishes
        await publish(bus, [make(upgraded(a, done=True)), make(upgraded(b))])
        await lines.until(r" n1 +limit 1  in flight 1  done 1  waiting 0")
        await publish(bus, [make(upgraded(b, done=True))])
        summary = await lines.until(r"^engine-upgrade wave done")
        assert f"2 volumes on {NEW}, blocked 1 (degraded 1)" in summary
        assert await asyncio.wait_for(lines.proc.wait(), DEADLINE_S) == 0
        for line in lines.seen:
            found = IN_FLIGHT.match(line)
            if found and found.group(1) != "total":
                assert int(found.group(3)) <= int(found.group(2)), line


async def test_a_bus_without_corral_streams_is_a_clear_error(nats_server: NatsServer) -> None:
    async with await connect(nats_server.url, "test-no-streams") as bare:
        await reset_jetstream(bare)
    corral = Path(sys.executable).with_name("corral")
    proc = await asyncio.create_subprocess_exec(
        str(corral),
        "progress",
        "engine-upgrade",
        "--nats",
        nats_server.url,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
    assert proc.returncode == 1, (out, err)
    assert b"no LH_OBJECTS stream at " + nats_server.url.encode() in err
    assert b"Traceback" not in err


FAKE_KUBECTL = """#!{python}
import os, signal, sys, time
from pathlib import Path
Path(os.environ["FAKE_KUBECTL_LOG"]).write_text(" ".join(sys.argv[1:]) + "\\n" + str(os.getpid()))
if sys.argv[1:] != ["--namespace", "corral", "port-forward", "svc/corral-nats", ":4222"]:
    print("error: services not found", file=sys.stderr)
    sys.exit(1)
print("Forwarding from 127.0.0.1:" + os.environ["FAKE_NATS_PORT"] + " -> 4222", flush=True)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
while True:
    time.sleep(1)
"""


async def test_the_kubectl_plugin_reads_progress_through_a_port_forward(
    bus: Bus, nats_server: NatsServer, tmp_path: Path
) -> None:
    """`kubectl corral progress engine-upgrade --port-forward corral/corral-nats`: the plugin runs
    `kubectl port-forward` itself (a stand-in kubectl here, which forwards to the test's NATS),
    reads the wave through it, and stops the port-forward when it exits."""
    events = Events()
    make = events.event
    cluster = [make(longhorn_node(n)) for n in NODES]
    cluster += [make(engine_image(NEW)), make(setting(DEFAULT_IMAGE_SETTING, NEW))]
    cluster += [make(setting(LIMIT_SETTING, "1"))]
    cluster += [make(obj) for obj in with_replicas(volume("a", image=NEW))]
    await publish(bus, [*cluster, *events.resync()])
    kubectl, log = tmp_path / "kubectl", tmp_path / "kubectl.log"
    kubectl.write_text(FAKE_KUBECTL.format(python=sys.executable))
    kubectl.chmod(0o755)
    port = nats_server.url.rsplit(":", 1)[1]
    environment = {"KUBECTL": str(kubectl), "FAKE_NATS_PORT": port, "FAKE_KUBECTL_LOG": str(log)}

    async def plugin(target: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("kubectl-corral")),
            *("progress", "engine-upgrade", "--port-forward", target),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, **environment, "CORRAL_NATS_URL": "nats://user:secret@127.0.0.1:1"},
        )
        out, err = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    code, out, err = await plugin("corral/corral-nats")
    assert code == 0, (out, err)
    assert ("engine-upgrade wave done" in out and "1 volumes on" in out) or "1 volume" in out
    forwarded, pid = log.read_text().splitlines()
    assert forwarded == "--namespace corral port-forward svc/corral-nats :4222"
    with pytest.raises(ProcessLookupError):  # the port-forward was stopped (and reaped)
        os.kill(int(pid), 0)

    code, out, err = await plugin("corral/no-such-service")
    assert code == 1
    assert "kubectl port-forward to corral/no-such-service failed: error: services not found" in err
    assert "secret" not in err and "Traceback" not in err
