"""SIGTERM and SIGINT become a stop request the service can act on, not an exception mid-write.

Kubernetes sends SIGTERM and waits `terminationGracePeriodSeconds` before SIGKILL. In that window a
service stops fetching, lets the messages it holds finish (or naks them so another replica gets them
at once), releases its leader lease so the standby does not wait out the TTL, and exits 0. A second
signal means the operator is done waiting: the service is cancelled at once.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """While installed, the first stop signal sets `stop` and a second one calls `force`."""

    def __init__(self, stop: asyncio.Event, force: Callable[[], None]) -> None:
        self.stop = stop
        self.force = force
        self.received: signal.Signals | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _on_signal(self, signum: signal.Signals) -> None:
        if self.received is None:
            self.received = signum
            self.stop.set()
        else:
            self.force()

    def install(self) -> StopSignals:
        self._loop = asyncio.get_running_loop()
        for signum in STOP_SIGNALS:
            self._loop.add_signal_handler(signum, self._on_signal, signum)
        return self

    def remove(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            for signum in STOP_SIGNALS:
                self._loop.remove_signal_handler(signum)
        self._loop = None

    def __enter__(self) -> StopSignals:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.remove()
