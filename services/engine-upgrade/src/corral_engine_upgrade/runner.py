"""The engine-upgrade service on the bus: LH_OBJECTS, LH_RESULTS and its own LH_COMMANDS in,
LH_COMMANDS out.

Around the pure decider (core.py) this adds only plumbing:

* the view is bootstrapped from LH_OBJECTS (the last event per object, then every new one) and
  results are followed on LH_RESULTS; nothing is decided before both snapshots are read and the
  decider has seen a RESYNCED marker for every kind it reads (`decider.ready`);
* decisions are batched: after an event the loop waits `debounce_s` for the rest of a burst, then
  calls `decide()` once; it also wakes for the decider's own timers (expectation expiry, retry);
* only the leader (NATS KV lease, through the runtime harness) decides and publishes; a standby
  keeps its view warm;
* every replica follows the service's own commands (command_feed.py) and adopts those it did not
  issue as expectations (`EngineUpgradeDecider.adopt_command`), so the in-flight count includes the
  commands of a predecessor (or a rival) that the view does not reflect yet;
* takeover (takeover.py): a replica that becomes leader decides only once it has caught up with
  the bus (LH_OBJECTS, LH_RESULTS, the writes the actuator reported) and adopted every pending
  command once more, so the limit holds across a change of leader;
* commands are published to `lh.cmd.engine-upgrade.volume.<ns>.<name>` with the command id as
  Nats-Msg-Id, so a republished identical decision is stored once; a command JetStream did not
  store is reported to the decider as an `error` result, which frees its slot;
* metrics: candidates and in flight per owner node (read from the decider at scrape time),
  commands, results, events, decision time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import time
from collections.abc import Iterable
from typing import Annotated, Any

import msgspec
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from corral_bus import BootstrapReader, Bus, Publisher, PublishError, StreamMessage
from corral_engine_upgrade.adoption import SeenCommands
from corral_engine_upgrade.command_feed import CommandFeed
from corral_engine_upgrade.core import SERVICE, DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.takeover import Takeover
from corral_engine_upgrade.view import KIND_STRUCTS, REQUIRED_KINDS, InvalidEvent
from corral_model import codec
from corral_model.codec import SchemaError
from corral_model.envelopes import Command, CommandResult, ObjectEvent, Outcome
from corral_model.subjects import (
    OBJECTS_PREFIX,
    RESULTS_PREFIX,
    RESULTS_STREAM,
    command_subject,
    escape_token,
)
from corral_runtime import ServiceConfig
from corral_runtime.logs import Logger
from corral_runtime.service import ServiceContext

BOOTSTRAP = "bootstrap"
RESULTS_FILTER = f"{RESULTS_PREFIX}.{SERVICE}.>"


class EngineUpgradeConfig(ServiceConfig, kw_only=True, frozen=True):
    debounce_s: Annotated[float, msgspec.Meta(ge=0)] = 0.05
    """After an event, wait this long for the rest of a burst before deciding."""
    handover_delay_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """An extra pause after a new leader has caught up with the bus (takeover), before it decides.
    Not needed for the limit: the takeover adopts the predecessor's pending commands."""
    handover_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    """The longest a new leader waits to read LH_OBJECTS and LH_RESULTS to their ends; then it goes
    on (logged). Writes the actuator reported are waited for regardless (up to applied_ttl_s)."""
    command_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    """A command with neither a result nor a visible effect after this long is presumed lost and
    its slot freed. Keep it above the actuator's `max_command_age_s` (default 30 s) plus the worst
    clock skew between pods: the actuator then refuses a command before its issuer forgets it, so a
    late-applied command can never add to a slot already given to another."""
    applied_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    retry_backoff_s: Annotated[float, msgspec.Meta(gt=0)] = 120.0
    tombstone_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    catch_up_batch: Annotated[int, msgspec.Meta(ge=0)] = 5000
    """When idle, classify this many not yet judged volumes per round (exact candidate metrics)."""

    def decider_config(self) -> DeciderConfig:
        return DeciderConfig(
            command_ttl=self.command_ttl_s,
            applied_ttl=self.applied_ttl_s,
            retry_backoff=self.retry_backoff_s,
            tombstone_ttl=self.tombstone_ttl_s,
        )


def object_filters(namespace: str) -> list[str]:
    """LH_OBJECTS subjects of the kinds the decider reads, in the Longhorn namespace."""
    ns = escape_token(namespace)
    return [f"{OBJECTS_PREFIX}.{kind}.{ns}.>" for kind in sorted(REQUIRED_KINDS)]


_DECODE_AS = {kind: ObjectEvent[struct] for kind, struct in KIND_STRUCTS.items()}  # type: ignore[valid-type]


def decode_event(message: StreamMessage) -> ObjectEvent[Any]:
    """Decode by the kind token of `lh.obj.<kind>.<ns>.<name>`, straight into the slim Struct."""
    kind = message.subject.split(".", 3)[2]
    type_ = _DECODE_AS.get(kind)
    if type_ is None:
        raise SchemaError(f"subject {message.subject} is not a kind this service reads")
    event: ObjectEvent[Any] = message.decode(type_)
    return event


class DeciderCollector(Collector):
    """Per-owner-node gauges read from the decider when Prometheus scrapes, not on every event."""

    def __init__(self, decider: EngineUpgradeDecider) -> None:
        self.decider = decider

    def collect(self) -> Iterable[GaugeMetricFamily]:
        in_flight = GaugeMetricFamily(
            "corral_engine_upgrade_in_flight",
            "Upgrades in flight per owner node (view + commands not yet reflected).",
            labels=["node"],
        )
        for node, count in sorted(self.decider.in_flight_by_node().items()):
            in_flight.add_metric([node], count)
        candidates = GaugeMetricFamily(
            "corral_engine_upgrade_candidates",
            "Volumes waiting for a slot per owner node (known so far under the current rules).",
            labels=["node"],
        )
        for node, count in sorted(self.decider.candidates_by_node().items()):
            candidates.add_metric([node], count)
        unjudged = GaugeMetricFamily(
            "corral_engine_upgrade_unjudged_volumes",
            "Volumes not yet judged under the current rules (judged lazily after a rules change).",
        )
        unjudged.add_metric([], self.decider.unclassified())
        volumes = GaugeMetricFamily("corral_engine_upgrade_volumes", "Volumes in the view.")
        volumes.add_metric([], self.decider.view.volume_count)
        return [in_flight, candidates, unjudged, volumes]


class RunnerMetrics:
    def __init__(self, registry: CollectorRegistry | None, decider: EngineUpgradeDecider) -> None:
        self.events = Counter(
            "corral_engine_upgrade_events", "Object events applied, by kind.", ["kind"], registry=registry
        )
        self.bad_events = Counter(
            "corral_engine_upgrade_bad_events",
            "Object events that could not be read (skipped).",
            registry=registry,
        )
        self.commands = Counter(
            "corral_engine_upgrade_commands",
            "Commands published, by kind of upgrade.",
            ["mode"],
            registry=registry,
        )
        self.publish_failures = Counter(
            "corral_engine_upgrade_publish_failures", "Commands JetStream did not store.", registry=registry
        )
        self.results = Counter(
            "corral_engine_upgrade_results",
            "Command results received, by outcome.",
            ["outcome"],
            registry=registry,
        )
        self.adopted = Counter(
            "corral_engine_upgrade_adopted_commands",
            "Commands of other replicas (or an earlier run) counted as in flight here.",
            registry=registry,
        )
        self.takeover_seconds = Histogram(
            "corral_engine_upgrade_takeover_seconds",
            "From becoming leader to the first decision (catching up with the bus).",
            buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0),
            registry=registry,
        )
        self.decision_seconds = Histogram(
            "corral_engine_upgrade_decision_seconds",
            "Time of one decide() call.",
            buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0),
            registry=registry,
        )
        if registry is not None:
            registry.register(DeciderCollector(decider))


class EngineUpgradeRunner:
    def __init__(
        self,
        bus: Bus,
        config: EngineUpgradeConfig,
        log: Logger,
        registry: CollectorRegistry | None = None,
        *,
        is_leader: Any = lambda: True,
    ) -> None:
        self.bus = bus
        self.config = config
        self.log = log
        self.decider = EngineUpgradeDecider(time.time, config.decider_config())
        self.metrics = RunnerMetrics(registry, self.decider)
        self._is_leader = is_leader
        self._wake = asyncio.Event()
        self._taken_over = False  # caught up with the bus since this replica became leader
        self._term = 0  # counts leadership changes: a takeover belongs to the term it started in
        self._publisher = Publisher(bus, window=1024)
        self.objects = BootstrapReader(bus, object_filters(config.namespace))
        self.results = BootstrapReader(bus, [RESULTS_FILTER], stream=RESULTS_STREAM)
        self.seen = SeenCommands(config.command_ttl_s, config.applied_ttl_s)
        self._pruned_at = 0.0
        self.commands = CommandFeed(bus, SERVICE, self._on_command, log)
        self.takeover = Takeover(
            bus,
            self.decider,
            objects=self.objects,
            results=self.results,
            commands=self.commands,
            seen=self.seen,
            adopt=self._adopt,
            prune_seen=self._prune_seen,
            wake=self._wake,
            log=log,
            seconds=self.metrics.takeover_seconds,
            timeout_s=config.handover_timeout_s,
            delay_s=config.handover_delay_s,
        )
        self.bootstrapped = asyncio.Event()

    # --- leadership -----------------------------------------------------------------------------

    def leadership_changed(self, is_leader: bool) -> None:
        self._taken_over = False
        self._term += 1
        self._wake.set()

    # --- inputs -----------------------------------------------------------------------------------

    async def _follow_objects(self) -> None:
        handled = 0
        async for message in self.objects:
            try:
                event = decode_event(message)
                self.decider.apply(event)
                self.metrics.events.labels(event.kind).inc()
            except (SchemaError, InvalidEvent) as e:
                # Nothing was applied; the next event for that object (or a resync) brings it in.
                self.metrics.bad_events.inc()
                self.log.warning("skipping an unreadable object event", subject=message.subject, error=str(e))
            self._wake.set()
            handled += 1
            if handled % 1000 == 0:
                await asyncio.sleep(0)  # a long burst must not starve the decision loop

    async def _follow_results(self) -> None:
        async for message in self.results:
            try:
                result = message.decode(CommandResult)
            except SchemaError as e:
                self.log.warning("skipping an unreadable result", subject=message.subject, error=str(e))
                continue
            self.decider.record_result(result)
            self.seen.result(result, time.time())
            self.metrics.results.labels(str(result.outcome)).inc()
            self._wake.set()

    def _on_command(self, command: Command) -> None:
        """A command of this service on the bus: ours coming back, or another replica's to count."""
        if self.seen.command(command, time.time()) and self.decider.ready:
            self._adopt(command, self.seen.applied(command.id))

    def _adopt(self, command: Command, result: CommandResult | None) -> None:
        target = command.target
        volume = self.decider.view.volume(target.namespace, target.name)
        if volume is None or volume.expectation is not None:
            return  # gone, or already counted (our own command, or adopted before)
        self.decider.adopt_command(command)
        if volume.expectation is None:
            return  # already shown by the view, or its spec.image test can no longer pass
        self.metrics.adopted.inc()
        if result is not None:
            self.decider.record_result(result)  # `applied`: in flight until the view shows it
        self._wake.set()

    def _prune_seen(self, force: bool = False) -> None:
        """Forget commands and writes too old to matter (unless forced, at most once a second: it
        is a scan)."""
        now = time.monotonic()
        if force or now - self._pruned_at >= 1.0:
            self._pruned_at = now
            self.seen.prune(time.time())

    # --- decisions ----------------------------------------------------------------------------------

    def _may_decide(self) -> bool:
        return self.bootstrapped.is_set() and bool(self._is_leader())

    def _leads_in(self, term: int) -> bool:
        """Still leader, in the same term (not lost and regained meanwhile)."""
        return bool(self._is_leader()) and term == self._term

    async def _decide_once(self) -> list[Command]:
        started = time.perf_counter()
        commands = self.decider.decide()
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        if not commands:
            return commands
        for command in commands:
            target = command.target
            subject = command_subject(SERVICE, "volume", target.namespace, target.name)
            await self._publisher.publish(subject, codec.encode(command), msg_id=command.id)
        try:
            await self._publisher.flush()
        except PublishError as e:
            failed = {f.msg_id for f in e.failures}
            self.metrics.publish_failures.inc(len(failed))
            self.log.warning("commands not stored; their slots are freed", count=len(failed), error=str(e))
            for command in commands:
                if command.id in failed:
                    self.decider.record_result(
                        CommandResult(
                            command_id=command.id,
                            service=SERVICE,
                            target=command.target,
                            outcome=Outcome.ERROR,
                            detail="not stored in LH_COMMANDS",
                        )
                    )
        for command in commands:
            mode = "live" if command.reason.startswith("live") else "offline"
            self.metrics.commands.labels(mode).inc()
        self.log.info("commands published", count=len(commands))
        return commands

    async def _decision_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            timeout = self._sleep_for()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
            if stop.is_set():
                return
            self._prune_seen()
            if self.config.debounce_s:
                await asyncio.sleep(self.config.debounce_s)  # let the rest of a burst arrive
            if self._may_decide():
                if not self._taken_over:
                    term = self._term
                    try:
                        leading = functools.partial(self._leads_in, term)
                        self._taken_over = await self.takeover.run(stop, leading) and term == self._term
                    except Exception as e:  # NATS unreachable or slow: try again shortly
                        self.log.warning("takeover interrupted; retrying", error=str(e))
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), 0.5)
                        self._wake.set()
                        continue
                    if not self._taken_over:
                        continue
                await self._decide_once()
            elif self.bootstrapped.is_set() and self.config.catch_up_batch:
                self.decider.catch_up(self.config.catch_up_batch)

    def _sleep_for(self) -> float:
        """Until the decider's next timer or a periodic catch-up (a handover delay is waited in
        takeover.py)."""
        delays = [5.0]
        due = self.decider.next_due()
        if due is not None:
            delays.append(max(0.0, due - time.time()))
        if self.decider.unclassified() and self.config.catch_up_batch:
            delays.append(0.5)
        return min(delays)

    async def _wait_bootstrapped(self, stop: asyncio.Event) -> bool:
        """Both snapshots read and a RESYNCED marker seen for every kind."""
        while not stop.is_set():
            if self.objects.ready.is_set() and self.results.ready.is_set() and self.decider.ready:
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), 0.5)
            self._wake.clear()
        return False

    async def run(self, stop: asyncio.Event, on_bootstrapped: Any = None) -> None:
        await self.commands.start()
        await self.results.start()
        await self.objects.start()
        tasks = [
            asyncio.create_task(self._follow_results(), name="engine-upgrade-results"),
            asyncio.create_task(self._follow_objects(), name="engine-upgrade-objects"),
            asyncio.create_task(self.commands.run(stop), name="engine-upgrade-commands"),
        ]
        try:
            if await self._wait_bootstrapped(stop):
                # The view is long-lived: keep the cyclic collector from walking it again and again.
                gc.collect()
                gc.freeze()
                self.takeover.adopt_all_seen()  # what was seen while the view was incomplete
                self.bootstrapped.set()
                self.log.info(
                    "view bootstrapped",
                    volumes=self.decider.view.volume_count,
                    in_flight=sum(self.decider.in_flight_by_node().values()),
                )
                if on_bootstrapped is not None:
                    on_bootstrapped()
                self._wake.set()
                await self._decision_loop(stop)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self.objects.close()
            await self.results.close()
            await self.commands.close()
            with contextlib.suppress(PublishError):
                await self._publisher.flush()


async def main(ctx: ServiceContext[EngineUpgradeConfig], on_runner: Any = None) -> None:
    """The service body the runtime harness runs (`python -m corral_engine_upgrade`).
    `on_runner(runner)` lets an embedding (tests, `corral run` in one process) look at the runner."""
    leadership = ctx.leadership
    runner = EngineUpgradeRunner(
        ctx.bus,
        ctx.config,
        ctx.log,
        ctx.metrics,
        is_leader=lambda: ctx.is_leader,
    )
    if on_runner is not None:
        on_runner(runner)
    if leadership is not None:
        leadership.on_change(runner.leadership_changed)
    await runner.run(ctx.stop, on_bootstrapped=lambda: ctx.readiness.mark(BOOTSTRAP))
