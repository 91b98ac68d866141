"""The demo beside `corral run`'s supervisor: wait for the services, then show what they do, live.

Two parts, in this order (`corral run --demo NAME` picks one):
* `engine-upgrade`: a Longhorn upgrade brings a new engine image and the wave is shown per owner
  node until it is over (engine_wave.py);
* `setting-sync`: an operator changes `priority-class` and `taint-toleration` while volumes are
  attached; both are shown pending with their blockers, the volumes are detached, and the settings
  are shown applied (settings_change.py).

`corral run` supervises processes from its main thread; the demo is asyncio (NATS, Kubernetes), so
it runs in a thread of its own with its own event loop and stops when asked (Ctrl-C) or when it is
over, after one summary line per part. It never stops the run: whatever goes wrong is one line of
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
    from corral_bus import Bus
    from corral_bus.auth import NatsAuth
    from corral_cli.progress.render import ProgressView
    from corral_decision.progress import Progress

DEMO_IMAGE = "longhornio/longhorn-engine:v1.10.1"
READY_TIMEOUT_S = 180.0  # service imports and the sandbox take a while on a loaded 2-core machine
DEMOS = ("engine-upgrade", "setting-sync")
"""The demo's parts, in the order they run."""
SETTINGS_PHASE_TIMEOUT_S = 60.0  # settings shown blocked, then applied after the detach
HOLD_S = 3.0  # how long the blocked settings stay on screen before the volumes detach


@dataclass(frozen=True)
class DemoSettings:
    nats_url: str
    kubeconfig: str
    ready_urls: Sequence[str]
    """Every service's /readyz: the wave starts once all answer 200."""
    image: str = DEMO_IMAGE
    namespace: str = "longhorn-system"
    tty: bool = False
    keeps_running: bool = True
    """corral goes on after the wave (`corral run`), rather than the demo being all there is."""
    prefix: str = "corral run: demo"
    """What each of its remarks starts with."""
    demos: tuple[str, ...] = ("engine-upgrade",)
    """Which parts to show, in DEMOS' order (`corral run` passes what `--demo NAME` picks)."""
    nats_auth: NatsAuth | None = None
    """The demo reads the bus as `reader` on a locked-down NATS (corral_cli.run_nats)."""


class Demo:
    """`start()` returns at once; `stop()` asks the demo to end and waits for it (bounded)."""

    def __init__(self, settings: DemoSettings, out: IO[str]) -> None:
        self.settings = settings
        self.out = out
        self.finished = threading.Event()
        self.completed = False
        """True once the wave was shown to its end (every eligible volume on the new image)."""
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
        line = f"{self.settings.prefix}: {text}"
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
        try:
            done = True
            if "engine-upgrade" in settings.demos:
                done = await self._engine_wave(bus, stop)
            if done and "setting-sync" in settings.demos and not stop.is_set():
                done = await self._settings_change(bus, stop)
            if done and not stop.is_set() and settings.keeps_running:
                self.say("corral keeps running; Ctrl-C stops everything")
        finally:
            await bus.close()

    def _new_view(self) -> ProgressView:
        from corral_cli.progress.render import LineView, TerminalView

        view: ProgressView = TerminalView(self.out) if self.settings.tty else LineView(self.out)
        self._view = view
        return view

    async def _engine_wave(self, bus: Bus, stop: asyncio.Event) -> bool:
        """The engine-upgrade part; True once the wave is over."""
        from corral_cli.demo.engine_wave import bring_engine_image
        from corral_cli.progress.follow import follow_wave, summary

        settings = self.settings
        view = self._new_view()
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
            self.completed = report.finished
            return report.finished
        finally:
            if not showing.done():
                stop.set()  # whatever ended the demo early ends the view too
                showing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await showing

    async def _settings_change(self, bus: Bus, stop: asyncio.Event) -> bool:
        """The setting-sync part: change two group-A settings while volumes are attached, show them
        blocked, detach the volumes, show them applied. True once they are."""
        from corral_cli.demo.settings_change import DEMO_SETTINGS, attached_volumes, change_settings, detach
        from corral_cli.progress.follow import follow_wave

        settings = self.settings
        volumes = await attached_volumes(settings.kubeconfig, settings.namespace)
        blocked, applied = asyncio.Event(), asyncio.Event()

        def watch(model: Progress) -> None:
            rows = {row.node: row for row in model.groups()}
            if all(name in rows and rows[name].blocked for name in DEMO_SETTINGS):
                blocked.set()
            if blocked.is_set() and model.finished():
                applied.set()

        view = self._new_view()
        shown = asyncio.Event()  # ends this part's view (Ctrl-C ends it too)
        showing = asyncio.create_task(
            follow_wave(
                bus,
                view,
                namespace=settings.namespace,
                follow=True,
                stop=shown,
                on_note=self.say,
                service_name="setting-sync",
                on_progress=watch,
            )
        )
        changes = ", ".join(f"{name}={value}" for name, value in DEMO_SETTINGS.items())
        self.say(f"an operator sets {changes} while {len(volumes)} volumes are attached")
        try:
            await change_settings(settings.kubeconfig, settings.namespace, DEMO_SETTINGS)
            if not await _within(blocked, stop, SETTINGS_PHASE_TIMEOUT_S):
                return self._gave_up("the settings never showed as pending", stop)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), HOLD_S)  # let the blockers be read
            if stop.is_set():
                return False
            self.say(
                f"detaching the {len(volumes)} attached volumes: setting-sync applies both after the last"
            )
            detached_at = time.monotonic()
            await detach(settings.kubeconfig, settings.namespace, volumes)
            if not await _within(applied, stop, SETTINGS_PHASE_TIMEOUT_S):
                return self._gave_up("the settings were not applied after the detach", stop)
            took = time.monotonic() - detached_at
        finally:
            shown.set()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await showing
            self._view = None
        print(
            f"setting-sync: {' and '.join(DEMO_SETTINGS)} applied {took:.1f}s after the detach was asked"
            f" ({len(volumes)} volumes); pending with their blockers until then",
            file=self.out,
            flush=True,
        )
        return True

    def _gave_up(self, why: str, stop: asyncio.Event) -> bool:
        if not stop.is_set():
            self.say(f"stopped: {why} within {SETTINGS_PHASE_TIMEOUT_S:.0f}s")
        return False

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


async def _within(event: asyncio.Event, stop: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` (True), or until `stop` is set or `seconds` pass (False)."""
    waiting = {asyncio.create_task(event.wait()), asyncio.create_task(stop.wait())}
    try:
        await asyncio.wait(waiting, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waiting:
            task.cancel()
    return event.is_set()


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
