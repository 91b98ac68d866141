"""Live Longhorn Setting values the policy refers to, cached briefly.

The engine-upgrade rule lets a volume's image be set only to the current `default-engine-image`.
The actuator reads that Setting itself rather than trusting the command, but a burst of thousands
of engine upgrades must not cost thousands of GETs: values are cached for a couple of seconds and
concurrent readers of an expired value share one request.
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
        self, api: KubeApi, *, ttl: float = 2.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._api = api
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, str | None]] = {}
        self._pending: dict[tuple[str, str], asyncio.Future[str | None]] = {}

    async def value(self, namespace: str, name: str) -> str | None:
        """The Setting's `value`, or None when it does not exist. Raises TransientApiError."""
        key = (namespace, name)
        cached = self._cache.get(key)
        if cached is not None and self._clock() - cached[0] < self._ttl:
            return cached[1]
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
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
            self._pending.pop(key, None)
        self._cache[key] = (self._clock(), value)
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
