"""Honouring a cancellation that nats-py swallowed.

Python 3.11's `asyncio.wait_for` (inside every nats-py request) returns a result that came in as the
task was cancelled, nats-py answers a cancel inside a request with its own TimeoutError, and its
flush catches CancelledError and returns. Either way the task is still marked as cancelling but runs
on, and the next expiring `asyncio.timeout` quietly takes the mark away. A loop that retries on
errors then never ends: after a NATS restart a cancelled bootstrap reader read on for ever (issue 19
part 4), and a lease's renewal loop took the cancel for a failed renewal, so `stop()` waited until
the service was killed. Such loops call `raise_if_cancelled()` where they would go on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

log = logging.getLogger("corral.bus.cancellation")


def raise_if_cancelled() -> None:
    """Raise CancelledError if the running task has been asked to stop, whatever below it dropped
    the cancellation."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel the tasks and wait until each has ended.

    Not `with suppress(CancelledError): await task`: that also swallows a cancel of the caller's own
    task, so a stop stuck on a task that outlived its cancel could not be cut short either (the
    lease's 60 s teardowns). An error a task ended with is logged, not raised: this is clean-up.
    """
    running = {task for task in tasks if task is not None}
    for task in running:
        task.cancel()
    if not running:
        return
    await asyncio.wait(running)
    for task in running:
        if not task.cancelled() and task.exception() is not None:
            name = task.get_name() if isinstance(task, asyncio.Task) else repr(task)
            log.warning("task %s ended with %r", name, task.exception())
