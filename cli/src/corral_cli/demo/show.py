"""The demo beside `corral run`'s supervisor: wait for the services, start the wave, show it live.

`corral run` supervises processes from its main thread; the demo is asyncio (NATS, Kubernetes), so
it runs in a thread of its own with its own event loop and stops when asked (Ctrl-C) or when the
wave is over, after one summary line. It never stops the run: whatever goes wrong is one line of
output, and the services keep running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from corral_bus.auth import NatsAuth
    from corral_cli.progress.render import ProgressView

DEMO_IMAGE = "longhornio/longhorn-engine:v1.10.1"
READY_TIMEOUT_S = 180.0  # service imports and the sandbox take a while on a loaded 2-core machine


@dataclass(frozen=True)
class DemoSettings:
    nats_url: str
    kubeconfig: str
    ready_urls: Sequence[str]
    """Every service's /readyz: the wave starts once all answer 200."""
    image: str = DEMO_IMAGE
    namespace: str = "longhorn-system"
    tty: bool = False
    nats_auth: NatsAuth | None = None
    """The demo reads the bus as `reader` on a locked-down NATS (corral_cli.run_nats)."""


class Demo:
    """`start()` returns at once; `stop()` asks the demo to end and waits for it (bounded)."""

    def __init__(self, settings: DemoSettings, out: IO[str]) -> None:
        self.settings = settings
        self.out = out
        self.finished = threading.Event()
        self._stop = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None  # the demo loop's own view of `_stop`
        self._view: ProgressView | None = None
        self._thread = threading.Thread(target=self._main, name="corral-demo", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed: nothing to wake
                loop.call_soon_threadsafe(stopping.set)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def say(self, text: str) -> None:
        line = f"corral run: demo: {text}"
        if self._view is not None:
            self._view.note(line)  # a live table must not be torn by a remark
        else:
            print(line, file=self.out, flush=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except Exception as error:  # the demo is a show; the run goes on without it
            self.say(f"stopped: {type(error).__name__}: {error}")
        finally:
            self.finished.set()

    async def _run(self) -> None:
        from corral_bus import connect
        from corral_cli.demo.engine_wave import bring_engine_image
        from corral_cli.progress.follow import follow_wave, summary
        from corral_cli.progress.render import LineView, TerminalView

        logging.getLogger("corral.bus").setLevel(logging.ERROR)  # the run's own output says it
        settings = self.settings
        stop = self._stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stop.is_set():
            return  # stopped before the loop could be woken
        if not await self._services_ready(stop):
            return
        async with asyncio.timeout(10.0):
            bus = await connect(settings.nats_url, "corral-run-demo", auth=settings.nats_auth)
        view: ProgressView = TerminalView(self.out) if settings.tty else LineView(self.out)
        self._view = view
        self.say(f"a Longhorn upgrade brings engine image {settings.image}; the wave follows")
        showing = asyncio.create_task(
            follow_wave(
                bus,
                view,
                namespace=settings.namespace,
                target_image=settings.image,
                stop=stop,
                on_note=self.say,
            )
        )
        try:
            bringing = asyncio.create_task(
                bring_engine_image(settings.kubeconfig, settings.namespace, settings.image, on_step=self.say)
            )
            await _unless_stopped(bringing, stop)
            report = await showing
            self._view = None
            print(summary(report), file=self.out, flush=True)
            if report.finished:
                self.say("corral keeps running; Ctrl-C stops everything")
        finally:
            stop.set()  # whatever ended the demo ends the view too
            if not showing.done():
                showing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await showing
            await bus.close()

    async def _services_ready(self, stop: asyncio.Event) -> bool:
        """Every service answers /readyz with 200 (True), or the run stops or time runs out (False)."""
        pending = list(self.settings.ready_urls)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while pending:
            if stop.is_set():
                return False
            if time.monotonic() > deadline:
                self.say(f"not started: {', '.join(pending)} not ready after {READY_TIMEOUT_S:.0f}s")
                return False
            answers = await asyncio.gather(*(asyncio.to_thread(_ready, url) for url in pending))
            pending = [url for url, ok in zip(pending, answers, strict=True) if not ok]
            if pending:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)
        return True


async def _unless_stopped(task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """Await `task`, or cancel it once `stop` is set (Ctrl-C while the image deploys)."""
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return
    task.result()  # re-raise what went wrong


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False
