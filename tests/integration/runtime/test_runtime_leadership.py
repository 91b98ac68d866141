"""Leadership over the bus lease: callbacks on gain and loss, waiting to lead, hand-over on close."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from corral_bus import Bus
from corral_runtime.leadership import Leadership
from corral_runtime.logs import get_logger


@pytest.mark.integration
async def test_leadership_moves_to_the_standby_when_the_leader_closes(bus: Bus) -> None:
    service = f"svc-{uuid.uuid4().hex[:8]}"
    log = get_logger()
    first = Leadership(bus, service, "replica-a", ttl_s=2.0, log=log)
    second = Leadership(bus, service, "replica-b", ttl_s=2.0, log=log)
    seen: dict[str, list[bool]] = {"a": [], "b": []}
    first.on_change(lambda leads: seen["a"].append(leads))

    async def record_b(leads: bool) -> None:
        seen["b"].append(leads)

    second.on_change(record_b)
    try:
        await first.start()
        assert first.is_leader and seen["a"] == [True]
        await second.start()
        assert not second.is_leader
        waiting = asyncio.ensure_future(second.wait_leader())
        await asyncio.sleep(0)
        assert not waiting.done()

        losing = asyncio.ensure_future(first.wait_lost())
        await asyncio.sleep(0)
        assert not losing.done()
        await first.close()
        assert not first.is_leader and seen["a"] == [True, False]
        async with asyncio.timeout(1.0):
            await losing
        # Released, not expired: the standby takes over at its next poll, well inside the 2 s TTL.
        async with asyncio.timeout(1.5):
            await waiting
        assert second.is_leader and seen["b"] == [True]
    finally:
        await first.close()
        await second.close()
    assert seen["b"] == [True, False]
