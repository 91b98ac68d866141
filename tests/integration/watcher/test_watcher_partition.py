"""A frozen NATS server that stores the watcher's frames late never makes an older state of an
object the stream's last message (docs/nats-cluster.md, "late frames").

The chaos suite found it about one run in three; here it is forced. The watcher's publisher is
connected to one server of a real 3-server cluster (R3 LH_OBJECTS) that leads neither the stream
nor the cluster; that server is frozen (SIGSTOP: its sockets still take bytes, nothing answers)
and the next events of one object are written to it. The client leaves it after its pings go
unanswered, re-sends to another server and stores the object's newest state there. Then the server
is thawed: it reads the frames it was holding and hands them to the stream leader, whose answer
arrives at the publisher's inbox. The object's last message must still be its newest state.
Before the fix, the intermediate state (never re-sent: only the newest per object was) was stored
last here every time.

Two ways the late frame is refused: within the stream's deduplication window the re-send of the
same event already holds its `Nats-Msg-Id` (the publisher re-sends every event in flight, the
intermediate one included); past it (a partition longer than the window, here a window of one
second) only `Nats-Expected-Last-Subject-Sequence` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import msgspec
import nats.errors
import pytest
from nats.aio.msg import Msg
from nats.js.errors import ServiceUnavailableError

from corral_bus import Bus, StreamSettings, connect, ensure_streams
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.subjects import OBJECTS_STREAM, object_subject
from corral_watcher.publishing import OrderedPublisher
from tests.fixtures.nats import reset_jetstream
from tests.fixtures.nats_cluster import ClusterServer, NatsCluster
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration

ATTEMPTS = 3
ANSWER_WITHIN_S = 20.0
SUBJECT = object_subject("volume", "longhorn-system", "pvc-a")
_event = msgspec.json.Decoder(ObjectEvent[Any])


def message(resource_version: int) -> tuple[str, bytes, str, None]:
    """The watcher's message for one state of volume pvc-a (events.py's subject, id and payload)."""
    event: ObjectEvent[Any] = ObjectEvent(
        type=EventType.MODIFIED,
        kind="volume",
        namespace="longhorn-system",
        name="pvc-a",
        uid="u1",
        resource_version=str(resource_version),
        object={"state": resource_version},
    )
    return SUBJECT, msgspec.json.encode(event), f"volume:u1:{resource_version}", None


async def leader(bus: Bus, stream: str) -> str:
    async def named() -> str | None:
        try:
            info = await bus.js.stream_info(stream)
        except Exception:
            return None
        return info.cluster.leader if info.cluster is not None else None

    return await eventually(named, within=30, what=f"{stream}'s leader")


def meta_leader(cluster: NatsCluster) -> str:
    for server in cluster.servers:
        answer = server.monitor("jsz")
        meta = answer.get("meta_cluster") if answer else None
        if isinstance(meta, dict) and meta.get("leader"):
            return str(meta["leader"])
    return ""


async def last_version(bus: Bus) -> str:
    """The resourceVersion of the object's last message, read again while the cluster answers 503
    or not at all (a thawed server can start an election of the stream's leader)."""

    async def read() -> str | None:
        try:
            stored = await bus.js.get_last_msg(OBJECTS_STREAM, SUBJECT)
        except (ServiceUnavailableError, nats.errors.TimeoutError):
            return None
        return _event.decode(stored.data or b"").resource_version

    return await eventually(read, within=60, what="the object's last message", interval=0.2)


@pytest.mark.parametrize(
    ("dedup_window", "refusal"),
    [(120.0, b"duplicate"), (1.0, b"wrong last sequence")],
    ids=["within-the-dedup-window", "past-the-dedup-window"],
)
async def test_frames_a_frozen_server_stores_late_never_overtake_the_newest_state(
    nats_cluster: NatsCluster, dedup_window: float, refusal: bytes
) -> None:
    admin = await connect(nats_cluster.url, "partition-test")
    await reset_jetstream(admin)
    await ensure_streams(admin.js, StreamSettings(replicas=3, objects_dedup_window=dedup_window))
    busy = {await leader(admin, OBJECTS_STREAM), meta_leader(nats_cluster)}
    frozen: ClusterServer = next(s for s in nats_cluster.servers if s.name not in busy)
    await admin.close()
    # The test's own reads go to the servers that stay up.
    admin = await connect([s.url for s in nats_cluster.servers if s is not frozen], "partition-test")
    try:
        newest = 9
        for _ in range(ATTEMPTS):
            answer = await partition(nats_cluster, frozen, admin, dedup_window, newest + 1)
            newest += 3
            await asyncio.to_thread(nats_cluster.wait_healthy)
            assert await last_version(admin) == str(newest), (
                f"an older state overtook the newest: the late frame's answer {answer!r}"
            )
            if answer is not None:
                assert refusal in answer
                return
        pytest.fail(f"the late frame was dropped unanswered in all {ATTEMPTS} partitions")
    finally:
        if frozen.frozen:
            frozen.thaw()
        await admin.close()


async def partition(
    nats_cluster: NatsCluster, frozen: ClusterServer, admin: Bus, dedup_window: float, first: int
) -> bytes | None:
    """One partition: states `first` .. `first + 2` of the object, the middle one written late
    by the frozen server. Returns the stream's answer to the late frame, or None when a thawed
    server's leader election dropped it unanswered (nothing stored then: safe, but it proves no
    refusal, so the test runs another partition with the object's next states)."""
    # Only the frozen-to-be server's URL: the client learns the others from it (cluster gossip)
    # and moves to one of them after two unanswered pings.
    bus = await connect(frozen.url, "watcher", ping_interval=0.5, max_outstanding_pings=2)
    publisher = OrderedPublisher(bus, ack_timeout=1.0)
    answers: dict[int, bytes] = {}
    late_token = -1
    late_answered = asyncio.Event()
    try:
        await publisher.start()
        with contextlib.suppress(nats.js.errors.NotFoundError):  # what a watcher's bootstrap reads
            publisher.learn(SUBJECT, (await admin.js.get_last_msg(OBJECTS_STREAM, SUBJECT)).seq or 0)
        prefix = publisher._prefix  # every ack of the publisher, late ones of dead sends included

        async def record(msg: Msg) -> None:
            token = int(msg.subject[len(prefix) :])
            answers[token] = msg.data
            if token == late_token:
                late_answered.set()

        await admin.nc.subscribe(prefix + "*", cb=record)
        await admin.nc.flush()
        await publisher.publish_batch([message(first)])
        async with asyncio.timeout(30):
            await publisher.flush()
        assert await last_version(admin) == str(first)

        frozen.freeze()
        # Written into the frozen server's socket buffer: the first goes out at once, the second
        # waits for the first's ack.
        late_token = publisher._next + 1
        await publisher.publish_batch([message(first + 1), message(first + 2)])
        async with asyncio.timeout(60):
            await publisher.flush()  # re-sent to another server and stored there
        assert bus.nc.connected_url is not None and bus.nc.connected_url.port != frozen.ports.client
        assert await last_version(admin) == str(first + 2)
        stored_at = time.monotonic()
        # The partition lasts as long as the scenario says: past the window, the stream has
        # forgotten the re-sent event's id, so only the expectation can refuse the late frame.
        await eventually(
            lambda: time.monotonic() - stored_at > 2 * dedup_window or dedup_window > 60,
            within=10,
            what="the deduplication window to pass",
        )

        frozen.thaw()
        # The frozen server reads what it held and hands it to the stream leader, who answers.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(late_answered.wait(), ANSWER_WITHIN_S)
        return answers.get(late_token)
    finally:
        if frozen.frozen:
            frozen.thaw()
        await publisher.close()
        await bus.close()
