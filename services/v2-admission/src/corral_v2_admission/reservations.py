"""One active DataEngineUpgradeManager even when two are created at once.

Longhorn serialises manager creates with a cluster Lease lock (§5.3). The race it guards against is
between two reviews: both read "no active manager" before either object is stored. Here manager
creates are judged one at a time, and a create this server admitted counts as an active manager
(state "") until the API shows it or `ttl_s` passes (kube-apiserver may still refuse to store it,
e.g. another webhook denies it; then it stops counting after the TTL). A dry-run create is judged but
reserves nothing. This holds for one server replica, which the chart runs; replicas would need a
shared lock (a Lease, and the write access it takes), which corral does not take.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class ManagerCreates:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.lock = asyncio.Lock()
        self._ttl = ttl_s
        self._clock = clock
        self._admitted: dict[tuple[str, str], float] = {}

    def pending(self, namespace: str, stored: dict[str, str]) -> dict[str, str]:
        """Managers admitted here and not yet stored (as state ""), to add to what the API shows."""
        now = self._clock()
        done = [
            key
            for key, until in self._admitted.items()
            if until <= now or (key[0] == namespace and key[1] in stored)
        ]
        for key in done:
            del self._admitted[key]
        return {name: "" for ns, name in self._admitted if ns == namespace}

    def admitted(self, namespace: str, name: str) -> None:
        self._admitted[(namespace, name)] = self._clock() + self._ttl
