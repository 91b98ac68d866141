"""The one runner every decision service stands on: LH_OBJECTS, LH_RESULTS and the service's own
LH_COMMANDS in, LH_COMMANDS out, around a `Decider` that only decides.

Parametrised by a `DecisionService` (name, kinds read, kinds commanded, config, decider factory),
it adds only plumbing:

* the view is bootstrapped from LH_OBJECTS (the last event per object, then every new one) and
  results are followed on LH_RESULTS; nothing is decided before both snapshots are read and the
  decider has seen a RESYNCED marker for every kind it reads (`decider.ready`);
* decisions are rate-limited, leading edge first, and wake for the decider's own timers
  (`next_due`): decision_loop.py, on the clocks and sleeper the runner is handed (`TimeSource`,
  timing.py), so `corral replay` runs the very same timing on a recording's clock;
* only the leader (NATS KV lease, through the runtime harness) decides and publishes; a standby
  keeps its view warm and does the decider's deferred work (`idle_work`);
* every replica follows the service's own commands (command_feed.py) and adopts those it did not
  issue (`Decider.adopt`), so its expectations include a predecessor's (or a rival's) commands;
* takeover (takeover.py): a replica that becomes leader decides only once it has caught up with
  the bus and adopted every pending command once more, so the service's limits hold across a
  change of leader;
* commands are published to `lh.cmd.<service>.<kind>.<ns>.<name>` with the command id as
  Nats-Msg-Id, so a republished identical decision is stored once, and with the lease term this
  replica leads in (`Command.term`, outside the id), so the actuator can refuse a deposed leader's;
  a command JetStream did not store is reported to the decider as an `error` result, which frees
  what it held;
* every command also says what input its pass had taken in (decided_on.py: the last object event
  and result applied), so `corral replay` decides on exactly that input;
* with a tracer (a collector is configured), each command gets a span in the trace of the event
  that led to it, and carries it to the actuator in its `traceparent` (tracing.py says which event
  is the parent when a burst held several); without one, no trace state is kept at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from opentelemetry import trace
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from corral_bus import BootstrapReader, Bus, Publisher, PublishError, StreamMessage
from corral_bus.cancellation import cancel_and_wait
from corral_decision.coexistence import Coexistence, Mode, Stance
from corral_decision.command_feed import CommandFeed
from corral_decision.decided_on import DECIDED_ON_HEADER, DecidedOn
from corral_decision.decider import InvalidEvent, Runnable
from corral_decision.decision_loop import DecisionLoop
from corral_decision.events import is_event
from corral_decision.metrics import RunnerMetrics
from corral_decision.seen import SeenCommands
from corral_decision.service import DecisionConfig, DecisionService
from corral_decision.supervision import supervise
from corral_decision.takeover import Takeover
from corral_decision.time_source import LIVE, TimeSource
from corral_decision.tracing import DecisionBatch, DecisionTraces
from corral_model import codec
from corral_model.codec import SchemaError
from corral_model.envelopes import Command, CommandResult, ObjectEvent, Outcome
from corral_model.subjects import RESULTS_PREFIX, RESULTS_STREAM, command_subject, escape_token
from corral_model.version import VERSION_HEADER, corral_version
from corral_runtime.logs import Logger

_MADE_BY = {VERSION_HEADER: corral_version()}
"""Every command says which corral decided it (a replay compares that with its own)."""

BOOTSTRAP = "bootstrap"
"""The readiness condition the runner marks once its view is bootstrapped."""


class EventDecoder:
    """Decodes `lh.obj.<kind>.<ns>.<name>` by its kind token, straight into the service's Struct."""

    def __init__(self, service: DecisionService[Any]) -> None:
        self._decoders: dict[str, codec.Decoder[ObjectEvent[Any]]] = {
            kind: codec.Decoder(ObjectEvent[struct])  # type: ignore[valid-type]
            for kind, struct in service.reads.items()
        }

    def __call__(self, message: StreamMessage) -> ObjectEvent[Any]:
        kind = message.subject.split(".", 3)[2]
        decoder = self._decoders.get(kind)
        if decoder is None:
            raise SchemaError(f"subject {message.subject} is not a kind this service reads")
        return decoder(message.data)


class DecisionRunner:
    """One replica of a decision service: `run(stop)` until stopped."""

    def __init__(
        self,
        service: DecisionService[Any],
        bus: Bus,
        config: DecisionConfig,
        log: Logger,
        registry: CollectorRegistry | None = None,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        lease_term: Callable[[], int] = lambda: 0,
        decider: Runnable | None = None,
        tracer: Tracer | None = None,
        timing: TimeSource = LIVE,
    ) -> None:
        self.service = service
        self.bus = bus
        self.config = config
        self.log = log
        self.timing = timing
        self.decider = decider if decider is not None else service.new_decider(config, timing.now)
        self.metrics = RunnerMetrics(service.metric_prefix, registry, self.decider, service.gauges)
        self.coexistence = self._new_coexistence(registry)
        self.decode_event = EventDecoder(service)
        self._is_leader = is_leader
        self._lease_term = lease_term
        self._wake = asyncio.Event()
        self._taken_over = False  # caught up with the bus since this replica became leader
        self._term = 0  # counts leadership changes: a takeover belongs to the term it started in
        self._publisher = Publisher(bus, window=1024)
        self.objects = BootstrapReader(bus, service.object_filters(config.namespace))
        self.results = BootstrapReader(
            bus, [f"{RESULTS_PREFIX}.{escape_token(service.name)}.>"], stream=RESULTS_STREAM
        )
        self.seen = SeenCommands(config.command_ttl_s, config.applied_ttl_s)
        self._pruned_at = 0.0
        self.commands = CommandFeed(bus, service.name, self._on_command, log)
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
            timing=timing,
        )
        self.bootstrapped = asyncio.Event()
        self._objects_seq = 0  # the last LH_OBJECTS event applied
        self._results_seq = 0  # the last LH_RESULTS result applied
        self.traces = DecisionTraces(tracer) if tracer is not None else None
        self.loop = self._new_decision_loop()

    def _new_coexistence(self, registry: CollectorRegistry | None) -> Coexistence:
        service, config = self.service, self.config
        coexistence = Coexistence(
            service.name,
            service.longhorn_loop,
            config.mode,
            config.namespace,
            self.decider,
            registry,
            on_stance=self._log_stance,
        )
        # the stance follows once the view is bootstrapped and the first pass decides (_log_stance)
        self.log.info("coexistence mode", mode=str(config.mode), stance="not yet decided")
        return coexistence

    def _new_decision_loop(self) -> DecisionLoop:
        """The runner's timing (decision_loop.py) on its `TimeSource`, its passes the runner's own."""
        return DecisionLoop(
            self.decider,
            self.timing,
            debounce_s=self.config.debounce_s,
            idle_batch=self.config.idle_batch,
            wake=self._wake,
            may_decide=self._may_decide,
            decide=self._decide,
            stand_by=self._stand_by,
            before_pass=self._prune_seen,
        )

    # --- leadership -----------------------------------------------------------------------------

    def leadership_changed(self, is_leader: bool) -> None:
        self._taken_over = False
        self._term += 1
        self._wake.set()

    # --- inputs -----------------------------------------------------------------------------------

    async def _follow_objects(self) -> None:
        """Apply LH_OBJECTS a batch at a time (what arrived since the last look), then wake the
        decisions once: per event only the decode and the decider's own apply remain."""
        handled = 0
        decode, apply, events = self.decode_event, self.decider.apply, self.metrics.events
        traces = self.traces
        counted: dict[str, int] = {}
        async for batch in self.objects.batches():
            for message in batch:
                try:
                    event = decode(message)
                    apply(event)
                    counted[event.kind] = counted.get(event.kind, 0) + 1
                    if traces is not None:
                        traces.applied(message)
                except (SchemaError, InvalidEvent) as e:
                    # Nothing was applied; the next event for that object (or a resync) brings it in.
                    self.metrics.bad_events.inc()
                    self.log.warning(
                        "skipping an unreadable object event", subject=message.subject, error=str(e)
                    )
            if batch:
                self._objects_seq = batch[-1].stream_seq
            for kind, count in counted.items():
                events.labels(kind).inc(count)
            counted.clear()
            self._wake.set()
            handled += len(batch)
            if handled >= 1000:
                handled = 0
                await self.timing.sleep(0)  # a long burst must not starve the decision loop

    async def _follow_results(self) -> None:
        async for message in self.results:
            self._results_seq = message.stream_seq
            try:
                result = message.decode(CommandResult)
            except SchemaError as e:
                self.log.warning("skipping an unreadable result", subject=message.subject, error=str(e))
                continue
            if result.target.kind != "Event":  # a report's result settles nothing
                self.decider.record_result(result)
            self.seen.result(result, self.timing.now())
            self.metrics.results.labels(str(result.outcome)).inc()
            self._wake.set()

    def _on_command(self, command: Command) -> None:
        """A command of this service on the bus: ours coming back, or another replica's to count."""
        if self.seen.command(command, self.timing.now()) and self.decider.ready:
            self._adopt(command, self.seen.applied(command.id))

    def _adopt(self, command: Command, result: CommandResult | None) -> None:
        if self.decider.adopt(command, result):
            self.metrics.adopted.inc()
            self._wake.set()

    def _prune_seen(self, force: bool = False) -> None:
        """Forget commands and writes too old to matter (unless forced, at most once a second: it
        is a scan)."""
        now = self.timing.monotonic()
        if force or now - self._pruned_at >= 1.0:
            self._pruned_at = now
            self.seen.prune(self.timing.now())

    # --- decisions ----------------------------------------------------------------------------------

    def _may_decide(self) -> bool:
        return self.bootstrapped.is_set() and bool(self._is_leader())

    def _leads_in(self, term: int) -> bool:
        """Still leader, in the same term (not lost and regained meanwhile)."""
        return bool(self._is_leader()) and term == self._term

    async def _publish(
        self, commands: Sequence[Command], decided_on: DecidedOn, traced: DecisionBatch | None = None
    ) -> None:
        service = self.service
        term = self._lease_term()
        headers = {**_MADE_BY, DECIDED_ON_HEADER: decided_on.header()}
        first = len(commands) > 1
        for command in commands:
            if term:  # fencing: the actuator refuses a leader older than the newest it saw
                command = msgspec.structs.replace(command, term=term)
            target = command.target
            token = service.command_token(target.kind)
            if token is None:  # a decider bug: never send what the actuator's policy would refuse
                self.log.error("decider commanded a kind it does not own", kind=target.kind)
                continue
            subject = command_subject(service.name, token, target.namespace, target.name)
            if traced is None:
                await self._publisher.publish(
                    subject, codec.encode(command), msg_id=command.id, headers=headers
                )
            else:
                with trace.use_span(traced.start(command, subject), end_on_exit=False):
                    await self._publisher.publish(
                        subject, codec.encode(command), msg_id=command.id, headers=headers
                    )
            if first:
                # The client's flusher writes only when this task yields, which a pass of many
                # commands does once a window of them is framed: a 100 k-volume cold start's first
                # pass (an upgrade, then 4 096 Events) held its upgrade back 19 ms for that. The
                # first goes out now; the rest follow as before, in the same order.
                first = False
                await asyncio.sleep(0)
        try:
            await self._publisher.flush()
        except PublishError as e:
            failed = {f.msg_id for f in e.failures}
            if traced is not None:
                traced.not_stored(failed)
            self.metrics.publish_failures.inc(len(failed))
            self.log.warning("commands not stored; what they held is freed", count=len(failed), error=str(e))
            for command in commands:
                if command.id in failed:
                    self.decider.record_result(
                        CommandResult(
                            command_id=command.id,
                            service=service.name,
                            target=command.target,
                            outcome=Outcome.ERROR,
                            detail="not stored in LH_COMMANDS",
                        )
                    )

    def _log_stance(self, mode: Mode, stance: Stance, why: str) -> None:
        self.log.info("coexistence", mode=str(mode), stance=str(stance), why=why)

    async def _decide_once(self) -> Sequence[Command]:
        started = time.perf_counter()
        decided_on = DecidedOn(self._objects_seq, self._results_seq, self.timing.now())
        decided = self.decider.decide()
        self.metrics.decision_seconds.observe(time.perf_counter() - started)
        # Beside a running longhorn-manager, what would double-drive is withheld (coexistence.py).
        commands, withheld = self.coexistence.screen(decided, self.timing.now())
        for result in withheld:
            self.decider.record_result(result)
        traces = self.traces
        if not commands:
            if traces is not None:
                traces.forget()
            return commands
        if traces is None:
            await self._publish(commands, decided_on)
        else:
            traced = traces.take()
            try:
                await self._publish(commands, decided_on, traced)
            finally:
                traced.end()
        mode = self.service.command_mode
        for command in commands:
            self.metrics.commands.labels("event" if is_event(command) else mode(command)).inc()
        self.log.info("commands published", count=len(commands))
        return commands

    async def _take_over(self, stop: asyncio.Event) -> bool:
        """Run the takeover for the current term; False when it must be tried again."""
        term = self._term
        try:
            leading = functools.partial(self._leads_in, term)
            self._taken_over = await self.takeover.run(stop, leading) and term == self._term
        except Exception as e:  # NATS unreachable or slow: try again shortly
            self.log.warning("takeover interrupted; retrying", error=str(e))
            await self.timing.wait(stop, 0.5)
            self._wake.set()
            return False
        return self._taken_over

    async def _decide(self, stop: asyncio.Event) -> None:
        """A leader's pass: the takeover first, once per term, then the decision."""
        if self._taken_over or await self._take_over(stop):
            await self._decide_once()

    def _stand_by(self) -> None:
        """A standby's pass: it decides nothing, and does the decider's deferred work."""
        if self.traces is not None:
            self.traces.forget()  # a standby decides nothing from them
        if self.bootstrapped.is_set() and self.config.idle_batch:
            self.decider.idle_work(self.config.idle_batch)

    async def _wake_on_stop(self, stop: asyncio.Event) -> None:
        """A stop request ends the decision loop's sleep at once, not at its next timer."""
        await stop.wait()
        self._wake.set()

    async def _wait_bootstrapped(self, stop: asyncio.Event) -> bool:
        """Both snapshots read and a RESYNCED marker seen for every kind."""
        while not stop.is_set():
            if self.objects.ready.is_set() and self.results.ready.is_set() and self.decider.ready:
                return True
            await self.timing.wait(self._wake, 0.5)
            self._wake.clear()
        return False

    async def _bootstrap_and_decide(
        self, stop: asyncio.Event, on_bootstrapped: Callable[[], None] | None
    ) -> None:
        if await self._wait_bootstrapped(stop):
            # The view is long-lived: keep the cyclic collector from walking it again and again.
            gc.collect()
            gc.freeze()
            self.takeover.adopt_all_seen()  # what was seen while the view was incomplete
            self.bootstrapped.set()
            self.log.info("view bootstrapped", in_flight=sum(1 for _ in self.decider.expectations()))
            if on_bootstrapped is not None:
                on_bootstrapped()
            self._wake.set()
            await self.loop.run(stop)

    async def run(self, stop: asyncio.Event, on_bootstrapped: Callable[[], None] | None = None) -> None:
        name = self.service.name
        # LH_OBJECTS' consumer takes the server longest to make (the last message of each of its
        # subjects: 0.1-0.2 s at 100 k volumes): asked for first, the results and the service's
        # commands are read while the server works on it, not after.
        creating = asyncio.ensure_future(self.objects.start())
        tasks: list[asyncio.Task[Any]] = []
        deciding: asyncio.Task[None] | None = None
        try:
            await self.commands.start()
            await self.results.start()
            tasks += [
                asyncio.create_task(self._follow_results(), name=f"{name}-results"),
                asyncio.create_task(self.commands.run(stop), name=f"{name}-commands"),
                asyncio.create_task(self._wake_on_stop(stop), name=f"{name}-stop"),
            ]
            await creating
            tasks.append(asyncio.create_task(self._follow_objects(), name=f"{name}-objects"))
            deciding = asyncio.create_task(
                self._bootstrap_and_decide(stop, on_bootstrapped), name=f"{name}-decisions"
            )
            # A follower that ends takes the service down (supervision.py), never blinds it quietly.
            await supervise(deciding, tasks, stop)
        finally:
            await cancel_and_wait(None if creating.done() else creating, deciding, *tasks)
            await self.objects.close()
            await self.results.close()
            await self.commands.close()
            with contextlib.suppress(PublishError):
                await self._publisher.flush()
