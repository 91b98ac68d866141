"""Following a decision service's wave on the bus (an engine-upgrade wave, instance managers
restarting, danger-zone settings being applied): LH_OBJECTS in, a progress view out, until it is over.

It reads what the decision service reads, the way it reads it (a `BootstrapReader` over the same
subjects, decoded as the kit's runner decodes them), so it needs nothing but a NATS URL: no
Kubernetes credentials, no service's metrics. Figures are drawn once the view is complete (a
RESYNCED marker seen for every kind), at most every `interval` seconds, so a burst of events
costs one redraw.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from corral_bus import BootstrapReader, Bus
from corral_cli.progress.render import ProgressView, blocked_text
from corral_decision import InvalidEvent, decision_service
from corral_decision.progress import GroupFigures, Progress
from corral_decision.runner import EventDecoder
from corral_model.codec import SchemaError

QUIET_HINT_S = 10.0  # say why nothing shows when no complete view arrived after this long
STALL_NOTE_S = 60.0  # say so when a wave with work left has not moved for this long


@dataclass
class WaveReport:
    """How a followed wave ended."""

    finished: bool
    elapsed: float
    total: GroupFigures
    limit: int
    default_image: str
    max_in_flight: dict[str, int] = field(default_factory=dict)
    """The highest in-flight figure drawn per owner node."""
    unreadable: int = 0
    """Events on LH_OBJECTS the view could not read (skipped, as the service skips them)."""
    service: str = "engine-upgrade"
    lost: str = ""
    """Why reading the bus ended on its own (the connection closed…); empty when it did not."""


async def follow_wave(
    bus: Bus,
    view: ProgressView,
    *,
    namespace: str = "longhorn-system",
    follow: bool = False,
    target_image: str = "",
    stop: asyncio.Event | None = None,
    interval: float = 0.1,
    on_note: Callable[[str], None] | None = None,
    service_name: str = "engine-upgrade",
    on_progress: Callable[[Progress], None] | None = None,
    limit: int | None = None,
) -> WaveReport:
    """Draw the wave until it is finished (`Progress.finished(target_image)`), forever with
    `follow`, or until `stop` is set. `on_note` gets one-line remarks (why nothing shows yet);
    `on_progress` sees the model after every drawn update (a demo waiting for a state). `limit`:
    corral's own per-node limit (engine-upgrade beside longhorn-manager), not the setting's."""
    service = decision_service(service_name)
    assert service.progress is not None, f"{service_name} offers progress"
    model = service.progress() if limit is None else service.progress(limit_override=limit)
    decode_event = EventDecoder(service)
    reader = BootstrapReader(bus, service.object_filters(namespace))
    changed = asyncio.Event()
    unreadable = 0
    started = time.monotonic()

    async def read() -> None:
        nonlocal unreadable
        async for message in reader:
            try:
                model.apply(decode_event(message))
            except (SchemaError, InvalidEvent):
                unreadable += 1  # the service skips it too; the next event for that object heals it
            changed.set()

    stop = stop or asyncio.Event()
    max_in_flight: dict[str, int] = {}
    finished = False
    hinted = False
    stall = StallWatch(on_note, service=service_name)
    await reader.start()
    reading = asyncio.create_task(read(), name="progress-reader")
    try:
        while not stop.is_set() and not reading.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 1.0)
            await asyncio.sleep(interval)  # the rest of a burst
            changed.clear()
            elapsed = time.monotonic() - started
            if not (reader.ready.is_set() and model.complete):
                if not hinted and elapsed > QUIET_HINT_S and on_note is not None:
                    hinted = True
                    on_note(f"no complete view of {namespace} on LH_OBJECTS yet (is the watcher running?)")
                continue
            view.update(model, elapsed)
            if on_progress is not None:
                on_progress(model)
            for row in model.groups():
                max_in_flight[row.node] = max(max_in_flight.get(row.node, 0), row.in_flight)
            if not follow and model.finished(target_image):
                finished = True
                break
            stall.saw(model.total())
    finally:
        lost = ""
        if reading.done() and not reading.cancelled():
            error = reading.exception()
            lost = f"{type(error).__name__}: {error}" if error else "the bus connection closed"
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reading
        await reader.close()
        view.close()
    return WaveReport(
        service=service_name,
        finished=finished,
        elapsed=time.monotonic() - started,
        total=model.total(),
        limit=model.limit,
        default_image=model.target,
        max_in_flight=max_in_flight,
        unreadable=unreadable,
        lost=lost,
    )


class StallWatch:
    """Says once (per stall) that a wave with work left has not moved for `after` seconds, so a
    stuck view reads as stuck, with a hint where to look, instead of as a slow wave."""

    def __init__(
        self,
        on_note: Callable[[str], None] | None,
        after: float = STALL_NOTE_S,
        service: str = "engine-upgrade",
    ) -> None:
        self.on_note = on_note
        self.service = service
        self.after = after
        self._key: object = None
        self._moved_at = time.monotonic()
        self._noted = False

    def saw(self, total: GroupFigures) -> None:
        now = time.monotonic()
        if total.key() != self._key:
            self._key, self._moved_at, self._noted = total.key(), now, False
            return
        work_left = total.in_flight or total.waiting
        if work_left and not self._noted and now - self._moved_at > self.after and self.on_note:
            self._noted = True
            self.on_note(
                f"no change for {self.after:.0f}s with {total.in_flight} in flight and {total.waiting}"
                f" waiting (is the {self.service} service running and leading? see its log)"
            )


def summary(report: WaveReport) -> str:
    """The one line printed when a wave is over."""
    total = report.total
    if report.service == "setting-sync":
        state = "applied" if report.finished else "lost" if report.lost else "stopped"
        pending = total.in_flight + total.blocked_total
        line = f"{report.service}: every danger-zone setting {state} after {report.elapsed:.1f}s"
        if not report.finished:
            line = (
                f"{report.service}: {state} after {report.elapsed:.1f}s, {pending} components on an old value"
            )
        return line + (f" ({report.lost})" if report.lost else "")
    peak = max(report.max_in_flight.values(), default=0)
    blocked = f", blocked {blocked_text(total)}" if total.blocked else ""
    state = "done" if report.finished else "lost" if report.lost else "stopped"
    if report.service == "im-restart":
        line = (
            f"im-restart {state} in {report.elapsed:.1f}s: {total.done} instance managers synced,"
            f" {total.in_flight} restarting, {total.waiting} due{blocked}"
        )
        return line + (f" ({report.lost})" if report.lost else "")
    if report.service == "v2-upgrade":
        line = (
            f"v2-upgrade {state} in {report.elapsed:.1f}s: {total.done} v2 volumes on nodes upgraded"
            f" to {report.default_image or '(no image)'}, {total.in_flight} in flight,"
            f" {total.waiting} waiting{blocked}"
        )
        return line + (f" ({report.lost})" if report.lost else "")
    line = (
        f"engine-upgrade wave {state} in {report.elapsed:.1f}s: {total.done} volumes on"
        f" {report.default_image or '(no default image)'}{blocked}; at most {peak} in flight on one"
        f" node (limit {report.limit})"
    )
    if report.unreadable:
        line += f"; {report.unreadable} unreadable events skipped"
    return line + (f" ({report.lost})" if report.lost else "")
