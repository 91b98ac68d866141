"""Cancelling background tasks on stop: a stop stuck on a task that outlived its cancel can still be
cut short by cancelling the stop itself, and an error a task ended with is not lost silently."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from corral_bus.cancellation import cancel_and_wait, raise_if_cancelled


async def test_a_cancelled_task_is_waited_for() -> None:
    ended = asyncio.Event()

    async def loop() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            ended.set()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await cancel_and_wait(task, None)
    assert task.cancelled() and ended.is_set()


async def test_a_stop_stuck_on_a_task_that_ignores_its_cancel_can_itself_be_cancelled() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                continue  # what a retry loop around a request that swallowed the cancel does

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    stop = asyncio.create_task(cancel_and_wait(task))
    await asyncio.sleep(0.05)
    assert not stop.done()
    stop.cancel()
    done, _ = await asyncio.wait({stop}, timeout=5)
    assert stop in done and stop.cancelled(), "the stop swallowed its own cancel"
    release.set()
    task.cancel()
    await asyncio.wait({task})


async def test_an_error_a_task_ended_with_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    async def broken() -> None:
        raise ValueError("bad state")

    task = asyncio.create_task(broken(), name="broken-loop")
    await asyncio.wait({task})
    with caplog.at_level(logging.WARNING, logger="corral.bus.cancellation"):
        await cancel_and_wait(task)
    assert "broken-loop" in caplog.text and "bad state" in caplog.text


async def test_a_loop_that_swallowed_a_cancel_stops_at_its_next_check() -> None:
    steps = 0

    async def loop() -> None:
        nonlocal steps
        while True:
            with contextlib.suppress(asyncio.CancelledError):  # as nats-py's flush does
                await asyncio.sleep(60)
            steps += 1
            raise_if_cancelled()

    task = asyncio.create_task(loop())
    await asyncio.sleep(0)
    await cancel_and_wait(task)
    assert task.cancelled() and steps == 1
