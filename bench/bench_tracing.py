"""What tracing costs per event on the two hot paths it hooks: the decision runner and the watcher.

`python -m bench.bench_tracing` writes bench/results/tracing.json. The paths, each timed per event
in bursts of BATCH (as they run: the runner follows a burst of LH_OBJECTS messages, the watcher
handles a batch of watch lines), over ROUNDS rounds whose median is the figure (the machine is
shared; its speed swings within seconds):

* runner: `DecisionRunner._follow_objects` over engine-upgrade wave events at 10 k volumes
  (bench_engine_upgrade's cluster and wave mix): decode, apply, count, and the trace hook. The
  messages are made untimed, as the watcher would publish them; between bursts the decider decides
  (untimed) so the wave goes on.
* watcher: `KindWatcher.handle` over batches of volume watch events, encoding each into its
  LH_OBJECTS message; the publisher is a stub that takes the batch (NATS is not what is measured).

Each path runs three ways, a burst each in turn so that a swing of the shared machine's speed falls on
all three alike: `baseline` (the runner and watch loop as they were before tracing, `BASELINE_REF`,
loaded from git beside today's), `off` (today's, no collector configured: the service has no
tracer, the messages carry no `traceparent`) and `on` (an SDK tracer whose spans go to a batch
processor with an exporter that drops them, and the messages carry a `traceparent`, as when a
collector is configured). off - baseline is what the hooks cost when tracing is off; on - off what
tracing costs when it is on. `decision_span_us_per_command` is the decision span (start, end) per
command, on. Each per-event figure also as this thread's CPU time (`per_event_cpu_us`), which leaves
out the time spent waiting for a core of the shared machine. Also: load average, and the empty-call
calibration of bench_engine_upgrade before and after (divide a figure by it to compare across
machines and loads). `--baseline-ref HEAD` measures the method itself: the same code three ways,
whose spread is the noise any difference must exceed. Measures only; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, cast

import msgspec
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from bench.bench_engine_upgrade import Prepared, Wave, calibration_ns
from bench.report import scaled, write_report
from corral_bus import MSG_ID_HEADER, Bus, StreamMessage
from corral_decision import DecisionConfig, DecisionRunner
from corral_engine_upgrade.service import DEFINITION
from corral_kube.decoding import WatchEvent
from corral_model import codec
from corral_model import longhorn as lh
from corral_model.envelopes import ObjectEvent
from corral_model.kinds import KINDS
from corral_model.subjects import object_subject
from corral_runtime.logs import get_logger
from corral_watcher.kindwatch import KindWatcher, WatchSettings
from corral_watcher.metrics import WatcherMetrics

NS = "longhorn-system"
VOLUMES = scaled(10_000, 300)
BATCH = 50
BURSTS = scaled(600, 20)
ROUNDS = scaled(5, 1)
WATCH_OBJECTS = scaled(2_000, 100)
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
BASELINE_REF = "3d49ca7"
"""The last commit before the tracing hooks: its runner and watch loop are the baseline."""
REPO = Path(__file__).resolve().parents[1]


class _Drop(SpanExporter):
    """An exporter that sends nothing: the cost measured is corral's and the SDK's, not a network's."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def tracer() -> Tracer:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(_Drop()))
    return provider.get_tracer("bench")


class _Feed:
    """Stands in for the runner's BootstrapReader: the burst's messages, then the end."""

    def __init__(self, messages: list[StreamMessage]) -> None:
        self.messages = messages

    async def __aiter__(self) -> AsyncIterator[StreamMessage]:
        for message in self.messages:
            yield message

    async def batches(self) -> AsyncIterator[list[StreamMessage]]:
        """What the runner reads: the burst as one batch."""
        yield self.messages


def _message(event: ObjectEvent[Any], traced: bool) -> StreamMessage:
    headers = {MSG_ID_HEADER: event.event_id}
    if traced:
        headers["traceparent"] = TRACEPARENT
    subject = object_subject(event.kind, NS, event.name)
    return StreamMessage(
        subject=subject, data=codec.encode(event), headers=headers, stream_seq=0, bootstrap=False
    )


def _median_rounds(per_burst: list[float]) -> tuple[float, list[float]]:
    size = max(1, len(per_burst) // ROUNDS)
    rounds = [statistics.fmean(per_burst[i : i + size]) for i in range(0, size * ROUNDS, size)]
    return statistics.median(rounds), [round(r, 3) for r in rounds]


class RunnerPath:
    """One decision runner following a running wave, a burst at a time."""

    def __init__(self, runner_cls: type[DecisionRunner], traced: bool) -> None:
        prepared = Prepared(VOLUMES)
        self.wave = Wave(prepared.cluster, prepared.in_flight)
        self.wave.warm_up(prepared.decider)
        self.traced = traced
        config = msgspec.convert({"service": "engine-upgrade", "instance": "bench"}, DecisionConfig)
        extra: dict[str, Any] = {"tracer": tracer()} if traced else {}
        self.runner = runner_cls(
            DEFINITION,
            cast("Bus", SimpleNamespace(reconnects=0)),
            config,
            get_logger(service="bench"),
            CollectorRegistry(),
            decider=prepared.decider,
            **extra,
        )
        self.span_costs: list[float] = []

    async def burst(self) -> tuple[float, float]:
        """µs per event (wall, thread CPU) of following one burst; then the decision (untimed, but
        its spans timed)."""
        runner, wave, perf = self.runner, self.wave, time.perf_counter
        runner.objects = _Feed([_message(wave.next(), self.traced) for _ in range(BATCH)])  # type: ignore[assignment]
        started, cpu = perf(), time.thread_time()
        await runner._follow_objects()
        per_event = ((perf() - started) / BATCH * 1e6, (time.thread_time() - cpu) / BATCH * 1e6)
        commands = list(runner.decider.decide())
        wave.started(commands)
        traces = getattr(runner, "traces", None)
        if traces is not None:
            batch = traces.take()
            if commands:
                started = perf()
                for command in commands:
                    batch.start(command, f"lh.cmd.engine-upgrade.volume.{NS}.{command.target.name}")
                batch.end()
                self.span_costs.append((perf() - started) / len(commands) * 1e6)
        return per_event


OnAck = Callable[[float], None]


class _Publisher:
    """Takes a batch as the OrderedPublisher would, without NATS."""

    bus = cast("Bus", SimpleNamespace(reconnects=0))

    async def publish_batch(self, messages: list[Any], on_last_ack: OnAck | None = None) -> None:
        return None


def _volume(index: int, rv: int) -> lh.Volume:
    return lh.Volume(
        metadata=lh.ObjectMeta(
            name=f"pvc-{index:05d}", namespace=NS, uid=f"uid-{index}", resource_version=str(rv)
        ),
        spec=lh.VolumeSpec(image="longhornio/longhorn-engine:v1.10.0", number_of_replicas=3),
    )


class WatcherPath:
    """One kind's watch loop handling batches of volume changes."""

    def __init__(self, watcher_cls: type[KindWatcher], traced: bool) -> None:
        extra: dict[str, Any] = {"tracer": tracer()} if traced else {}
        self.kind = watcher_cls(
            cast("Any", None),
            KINDS["volume"],
            WatchSettings(namespace=NS),
            cast("Any", _Publisher()),
            WatcherMetrics(),
            **extra,
        )
        self.rv = 1
        self.bursts = 0

    async def burst(self) -> tuple[float, float]:
        batch: list[Any] = []
        for i in range(BATCH):
            self.rv += 1
            index = (self.bursts * BATCH + i) % WATCH_OBJECTS
            batch.append(WatchEvent(type="MODIFIED", object=_volume(index, self.rv)))
        self.bursts += 1
        started, cpu = time.perf_counter(), time.thread_time()
        await self.kind.handle(batch)
        return (time.perf_counter() - started) / BATCH * 1e6, (time.thread_time() - cpu) / BATCH * 1e6


def module_at(ref: str, path: str, name: str) -> ModuleType:
    """The module `path` as it was at git `ref`, importable beside today's (same dependencies)."""
    source = subprocess.run(
        ["git", "show", f"{ref}:{path}"], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look their module up
    exec(compile(source, f"{ref}:{path}", "exec"), module.__dict__)
    return module


async def interleaved(paths: dict[str, Any]) -> dict[str, Any]:
    """Every path a burst in turn (rotating who goes first), so a swing of the shared machine's
    speed falls on all of them alike; per path the median of ROUNDS rounds' means."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    names = list(paths)
    for number in range(BURSTS):
        shift = number % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(await paths[name].burst())
    figures: dict[str, Any] = {}
    for name, values in samples.items():
        figure, rounds = _median_rounds([wall for wall, _ in values])
        cpu_figure, cpu_rounds = _median_rounds([cpu for _, cpu in values])
        figures[name] = {
            "per_event_us": round(figure, 3),
            "per_event_us_rounds": rounds,
            "per_event_cpu_us": round(cpu_figure, 3),
            "per_event_cpu_us_rounds": cpu_rounds,
        }
        span_costs = getattr(paths[name], "span_costs", None)
        if span_costs:
            figures[name]["decision_span_us_per_command"] = round(statistics.median(span_costs), 2)
    return figures


async def measure(baseline_ref: str) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "baseline_ref": baseline_ref,
        "calibration_empty_call_ns_before": round(calibration_ns(), 1),
        "load_average_1m_before": round(os.getloadavg()[0], 2),
    }
    old_runner = module_at(baseline_ref, "libs/decision/src/corral_decision/runner.py", "bench_old_runner")
    old_watch = module_at(
        baseline_ref, "services/watcher/src/corral_watcher/kindwatch.py", "bench_old_kindwatch"
    )
    runners = {
        "runner_baseline": RunnerPath(old_runner.DecisionRunner, traced=False),
        "runner_off": RunnerPath(DecisionRunner, traced=False),
        "runner_on": RunnerPath(DecisionRunner, traced=True),
    }
    gc.freeze()  # the three views are long-lived, as a runner's is
    figures.update(await interleaved(runners))
    figures.update(
        await interleaved(
            {
                "watcher_baseline": WatcherPath(old_watch.KindWatcher, traced=False),
                "watcher_off": WatcherPath(KindWatcher, traced=False),
                "watcher_on": WatcherPath(KindWatcher, traced=True),
            }
        )
    )
    figures["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    figures["calibration_empty_call_ns_after"] = round(calibration_ns(), 1)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--baseline-ref", default=BASELINE_REF, help="git ref of the code before tracing")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.baseline_ref))
    write_report(
        "tracing",
        figures,
        floors={
            "runner_off.per_event_us": "within noise of runner_baseline (no span, no trace state)",
            "watcher_off.per_event_us": "within noise of watcher_baseline",
        },
    )


if __name__ == "__main__":
    main()
