"""Live Longhorn Setting values the policy refers to, cached briefly.

The engine-upgrade rule lets a volume's image be set only to the current `default-engine-image`.
The actuator reads that Setting itself rather than trusting the command, but a burst of thousands
of engine upgrades must not cost thousands of GETs: values are cached for a couple of seconds and
concurrent readers of an expired value share one request.

A cached value is never older than the command it judges: a value read before the command was
made is read again (`not_before`), so a command decided on a default image that moved a moment ago
is judged on the new value, not refused on the old one for the cache's lifetime. A burst of
commands made at about the same time still costs one read: every command made before that read
started is judged on it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from corral_actuator.api import KubeApi
from corral_actuator.classify import Answer, TransientApiError
from corral_model.kinds import KINDS

_SETTING = KINDS["setting"]


class SettingValues:
    def __init__(
        self,
        api: KubeApi,
        *,
        ttl: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._api = api
        self._ttl = ttl
        self._clock = clock
        self._wall_clock = wall_clock
        # (monotonic time read, wall-clock time the read started, value)
        self._cache: dict[tuple[str, str], tuple[float, float, str | None]] = {}
        self._pending: dict[tuple[str, str], tuple[float, asyncio.Future[str | None]]] = {}

    async def value(self, namespace: str, name: str, *, not_before: float = 0.0) -> str | None:
        """The Setting's `value`, or None when it does not exist, from a read that started no
        earlier than `not_before` (wall clock; a command's createdAt). Raises TransientApiError."""
        key = (namespace, name)
        cached = self._cache.get(key)
        # A read started at or after the date asked for answers at once, before the clock is read
        # for the rare date that needs it (one that is ahead of this clock, below).
        if cached is not None and cached[1] >= not_before and self._clock() - cached[0] < self._ttl:
            return cached[2]
        # A date ahead of this clock (the issuer's clock runs ahead) asks for a read from now on.
        not_before = min(not_before, self._wall_clock())
        if cached is not None and self._clock() - cached[0] < self._ttl and cached[1] >= not_before:
            return cached[2]
        pending = self._pending.get(key)
        if pending is not None and pending[0] >= not_before:
            return await asyncio.shield(pending[1])
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        started = self._wall_clock()
        self._pending[key] = (started, future)
        try:
            value = await self._fetch(namespace, name)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as e:
            future.set_exception(e)
            future.exception()  # mark retrieved: waiters, if any, get it from their own await
            raise
        finally:
            if self._pending.get(key, (0.0, None))[1] is future:
                del self._pending[key]
        self._cache[key] = (self._clock(), started, value)
        future.set_result(value)
        return value

    async def _fetch(self, namespace: str, name: str) -> str | None:
        answered = await self._api.get(_SETTING.path(namespace, name))
        if answered.answer is Answer.NOT_FOUND:
            return None
        document = answered.document() if answered.answer is Answer.OK else None
        if document is None:
            raise TransientApiError(f"reading setting {name}: HTTP {answered.status} {answered.message}")
        value = document.get("value")
        return value if isinstance(value, str) else None

    def forget(self) -> None:
        self._cache.clear()
