"""Waiting on a condition with a deadline, instead of sleeping for a fixed time."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable


async def eventually(
    condition: Callable[[], bool] | Callable[[], Awaitable[bool]], within: float = 10.0, what: str = ""
) -> None:
    deadline = time.monotonic() + within
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within}s: {what or condition}")
        await asyncio.sleep(0.02)
