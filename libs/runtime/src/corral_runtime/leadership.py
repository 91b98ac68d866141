"""Which replica of a decision service may issue commands: the holder of its leader lease.

Replicas of a decision service all keep their view of the cluster warm, but only the leader
publishes commands; the others stand by to take over within the lease TTL. The lease itself (a NATS
KV key per service, compare-and-set on its revision) lives in the bus library; this adapter gives the
service what it asks about: am I the leader now, wait until I am, tell me when that changes.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable

from corral_bus.connection import Bus
from corral_bus.lease import Lease
from corral_runtime.logs import Logger

LeadershipCallback = Callable[[bool], Awaitable[None] | None]


class Leadership:
    """This replica's leader lease for `service`, renewed in the background until `close()`."""

    def __init__(
        self, bus: Bus, service: str, holder: str, ttl_s: float, log: Logger, *, replicas: int = 1
    ) -> None:
        self.bus = bus
        self.replicas = replicas
        self.service = service
        self.holder = holder
        self.ttl_s = ttl_s
        self.log = log
        self._is_leader = False
        self._changed = asyncio.Condition()
        self._callbacks: list[LeadershipCallback] = []
        self._lease: Lease | None = None

    @property
    def is_leader(self) -> bool:
        """Consult before every command: it turns false by itself once renewals stop succeeding."""
        return self._lease is not None and self._lease.is_leader

    @property
    def term(self) -> int:
        """The lease term this replica leads in (0 when it never led); see `Lease.term`."""
        return self._lease.term if self._lease is not None else 0

    @property
    def lease(self) -> Lease | None:
        return self._lease

    def on_change(self, callback: LeadershipCallback) -> None:
        """Call `callback(is_leader)` on every gain and loss (sync or async callables)."""
        self._callbacks.append(callback)

    async def wait_leader(self) -> None:
        """Return once this replica leads (at once if it does already)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._is_leader)

    async def wait_lost(self) -> None:
        """Return once this replica does not lead (at once if it does not): time to stop commanding."""
        async with self._changed:
            await self._changed.wait_for(lambda: not self._is_leader)

    async def start(self) -> None:
        """Make a first attempt at the lease (a sole replica leads at once), then keep at it."""
        self._lease = Lease(
            self.bus,
            self.service,
            self.holder,
            ttl=self.ttl_s,
            on_change=self._on_change,
            replicas=self.replicas,
        )
        await self._lease.start()

    async def close(self) -> None:
        """Release the lease (if held) so a standby takes over now rather than after the TTL."""
        if self._lease is not None:
            await self._lease.stop(release=True)
            self._lease = None
        await self._on_change(False)

    async def _on_change(self, is_leader: bool) -> None:
        if is_leader == self._is_leader:
            return
        self._is_leader = is_leader
        self.log.info("leadership gained" if is_leader else "leadership lost", lease=self.service)
        async with self._changed:
            self._changed.notify_all()
        for callback in self._callbacks:
            try:
                outcome = callback(is_leader)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                self.log.exception("leadership callback failed", is_leader=is_leader)
