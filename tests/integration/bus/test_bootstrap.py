"""Bootstrap: exactly the latest event per object, then new ones, and a signal in between."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from corral_bus import Bus, Publisher
from corral_bus.bootstrap import BootstrapReader, StreamMessage, follow
from corral_model import subjects
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration


async def _publish_history(bus: Bus) -> None:
    publisher = Publisher(bus)
    for version in range(1, 4):
        for i in range(5):
            subject = subjects.object_subject("volume", "longhorn-system", f"pvc-{i}")
            await publisher.publish(subject, f"volume {i} v{version}".encode(), msg_id=f"v{i}:{version}")
        await publisher.publish(
            subjects.object_subject("node", "longhorn-system", "node-1.example.com"),
            f"node v{version}".encode(),
            msg_id=f"n:{version}",
        )
    await publisher.flush()
    await publisher.close()


async def _take(iterator: AsyncIterator[StreamMessage], n: int) -> list[StreamMessage]:
    async with asyncio.timeout(10):
        return [await anext(iterator) for _ in range(n)]


async def test_latest_per_subject_then_new_ones(bus: Bus) -> None:
    await _publish_history(bus)
    reader = BootstrapReader(bus, [f"{subjects.OBJECTS_PREFIX}.volume.>"])
    iterator = aiter(reader)
    snapshot = await _take(iterator, 5)
    assert sorted(m.data.decode() for m in snapshot) == [f"volume {i} v3" for i in range(5)]
    assert all(m.bootstrap for m in snapshot)
    assert [m.caught_up for m in snapshot] == [False] * 4 + [True]
    assert reader.ready.is_set()

    publisher = Publisher(bus)
    await publisher.publish(subjects.object_subject("volume", "longhorn-system", "pvc-2"), b"volume 2 v4")
    await publisher.publish(subjects.object_subject("node", "longhorn-system", "n"), b"not mine")
    await publisher.publish(subjects.object_subject("volume", "longhorn-system", "pvc-9"), b"volume 9 v1")
    await publisher.flush()
    news = await _take(iterator, 2)
    assert [m.data for m in news] == [b"volume 2 v4", b"volume 9 v1"]
    assert not any(m.bootstrap for m in news)
    await publisher.close()
    await reader.close()


async def test_several_filters_and_callbacks(bus: Bus) -> None:
    await _publish_history(bus)
    reader = BootstrapReader(
        bus, [f"{subjects.OBJECTS_PREFIX}.volume.>", f"{subjects.OBJECTS_PREFIX}.node.>"], batch=2
    )
    seen: list[bytes] = []
    seen_when_bootstrapped: list[int] = []

    async def on_message(message: StreamMessage) -> None:
        seen.append(message.data)

    async def on_bootstrapped() -> None:
        seen_when_bootstrapped.append(len(seen))

    task = asyncio.create_task(follow(reader, on_message, on_bootstrapped))
    await eventually(lambda: bool(seen_when_bootstrapped), what="bootstrapped")
    assert seen_when_bootstrapped == [6]
    assert sorted(seen) == sorted([f"volume {i} v3".encode() for i in range(5)] + [b"node v3"])
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await reader.close()


async def test_empty_stream_is_ready_at_once(bus: Bus) -> None:
    reader = BootstrapReader(bus, [f"{subjects.OBJECTS_PREFIX}.engine.>"])
    bootstrapped = asyncio.Event()

    async def on_message(message: StreamMessage) -> None:
        raise AssertionError("nothing was published")

    async def on_bootstrapped() -> None:
        bootstrapped.set()

    task = asyncio.create_task(follow(reader, on_message, on_bootstrapped))
    async with asyncio.timeout(10):
        await bootstrapped.wait()
    assert reader.ready.is_set()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await reader.close()


async def test_a_reader_ends_when_its_task_was_cancelled_and_the_cancellation_swallowed(bus: Bus) -> None:
    """nats-py's flush catches CancelledError and returns: the task stays cancelling but runs on.
    The reader must still end instead of reading for ever (issue 19 part 4)."""
    reader = BootstrapReader(bus, [f"{subjects.OBJECTS_PREFIX}.node.>"])
    read: list[StreamMessage] = []

    async def read_after_a_swallowed_cancellation() -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # as nats-py's _flush_pending does
            await asyncio.Event().wait()
        async for message in reader:
            read.append(message)

    task = asyncio.create_task(read_after_a_swallowed_cancellation())
    done, _ = await asyncio.wait({task}, timeout=5)
    assert done and task.cancelled()
    assert read == []
    await reader.close()
