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


def raise_if_cancelled() -> None:
    """Raise CancelledError if the running task has been asked to stop, whatever below it dropped
    the cancellation."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
