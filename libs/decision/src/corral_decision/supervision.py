"""A decision service's background tasks are its eyes: one that ends takes the whole service down.

The runner follows LH_OBJECTS, LH_RESULTS and its own commands in tasks beside the decision loop.
If one of them ended (an exception nobody expected, a stream that vanished) and the loop carried on,
the service would decide on a view that no longer moves while /readyz still said 200: blind, and
silent about it. So the loop runs under `supervise`: when a watched task ends before the service
is asked to stop, the decision loop is cancelled and `TaskEnded` is raised, naming the task and
what it ended with. The runtime harness then logs the failure and exits non-zero, and the pod (or
`corral run`) restarts the service, which bootstraps its view afresh.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

from corral_bus.cancellation import cancel_and_wait


class TaskEnded(RuntimeError):
    """A task the service cannot work without ended while the service was running."""

    def __init__(self, task: asyncio.Task[Any]) -> None:
        error = None if task.cancelled() else task.exception()
        how = "was cancelled" if task.cancelled() else (f"failed: {error!r}" if error else "returned")
        super().__init__(f"task {task.get_name()} {how}; the service stops so that it is restarted")
        self.task_name = task.get_name()
        self.__cause__ = error


async def supervise(
    main: asyncio.Task[Any], watched: Collection[asyncio.Task[Any]], stop: asyncio.Event
) -> Any:
    """`main`'s result; raises `TaskEnded` (after cancelling `main`) if a task of `watched` ends
    before `stop` is set. Once stopping, tasks ending is expected and only `main` is waited for."""
    pending: set[asyncio.Task[Any]] = {main, *watched}
    while not main.done():
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        ended = [task for task in done if task is not main]
        if ended and not stop.is_set() and not main.done():
            await cancel_and_wait(main)
            raise TaskEnded(ended[0])
        if stop.is_set():
            pending = {main} if not main.done() else set()
    return main.result()
