"""The watcher: one list-then-watch loop per configured kind, sharing one ordered publisher.

Kinds are independent (a 410 on volumes does not disturb the watch on engines), so each runs in its
own task; they share the NATS connection and the publisher's window, so the bus sees one pipelined
stream of events. A guard follows what LH_OBJECTS stores, so that a state the watcher never
published cannot stand there unchallenged (corral_watcher.guard). Stopping cancels the loops (a
watch blocked on the network sees nothing else) and then waits until every event already taken
from a watch is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

from kubernetes_asyncio.client import ApiClient
from opentelemetry.trace import Tracer

from corral_bus import Bus
from corral_model.kinds import KINDS, KindInfo
from corral_watcher.guard import StreamGuard
from corral_watcher.kindwatch import KindWatcher, WatchSettings
from corral_watcher.metrics import WatcherMetrics
from corral_watcher.publishing import OrderedPublisher
from corral_watcher.truth import ApiTruth


def resolve_kinds(tokens: Sequence[str]) -> list[KindInfo]:
    """The KindInfo of each configured kind token; an unknown one is a configuration error."""
    unknown = [t for t in tokens if t not in KINDS]
    if unknown:
        raise ValueError(f"unknown kinds {unknown}; known: {sorted(KINDS)}")
    return [KINDS[t] for t in dict.fromkeys(tokens)]


class Watcher:
    def __init__(
        self,
        api: ApiClient,
        bus: Bus,
        kinds: Sequence[str],
        settings: WatchSettings,
        *,
        metrics: WatcherMetrics | None = None,
        publish_window: int = 8192,
        ack_timeout: float = 2.0,
        bootstrap: bool = True,
        tracer: Tracer | None = None,
        guard: bool = True,
    ) -> None:
        """`bootstrap`: start from what LH_OBJECTS already holds (see corral_watcher.bootstrap).
        `tracer`: each watched change starts a trace (see corral_watcher.tracing). `guard`: follow
        LH_OBJECTS and challenge a stored state ahead of the watcher's (see corral_watcher.guard)."""
        self.metrics = metrics or WatcherMetrics()
        self.publisher = OrderedPublisher(
            bus, window=publish_window, ack_timeout=ack_timeout, truth=ApiTruth(api, self.metrics)
        )
        self.kinds = {
            info.token: KindWatcher(
                api, info, settings, self.publisher, self.metrics, bus if bootstrap else None, tracer
            )
            for info in resolve_kinds(kinds)
        }
        self.guard = (
            StreamGuard(bus, self.kinds, self.publisher, grace=settings.guard_grace) if guard else None
        )
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        await self.publisher.start()
        self._tasks = [
            asyncio.create_task(kind.run(), name=f"watch-{token}") for token, kind in self.kinds.items()
        ]
        if self.guard is not None:
            self._tasks.append(asyncio.create_task(self.guard.run(), name="guard-lh-objects"))

    async def wait_synced(self) -> None:
        """Until every kind has been listed and published once."""
        await asyncio.gather(*(kind.synced.wait() for kind in self.kinds.values()))

    async def wait_failed(self) -> None:
        """Returns (raising its error) if a kind loop ever dies; loops only end on bugs."""
        done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            task.result()

    async def stop(self, flush_timeout: float = 10.0) -> None:
        """Cancel the loops, then wait (bounded) until what they took from the watches is stored."""
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # Bounded: shutting down must never hang on a loop that is slow to unwind.
            await asyncio.wait(self._tasks, timeout=flush_timeout)
        self._tasks = []
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(flush_timeout):
                await self.publisher.flush()
        await self.publisher.close()
