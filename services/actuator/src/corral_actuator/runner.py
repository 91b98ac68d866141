"""The actuator on the bus: commands in, API writes out, one CommandResult per command to LH_RESULTS.

Order of a command's life: decode (a malformed one goes to LH_DEAD through the bus consumer, and
the actuator carries on; so does one whose subject, payload and id disagree, addressing.py), answer
repeats from the record of recent commands, admit (date and lease term, admission.py), apply under
the object's lock, publish the result and wait for LH_RESULTS to store it, and only then let the
consumer ack the command. A crash anywhere before the ack redelivers the command; the redelivery reads the
object first, so what was written is not written again, and the result's Nats-Msg-Id (command id
and outcome) makes LH_RESULTS store it once.

Each sender's commands have a stream of their own (corral_model.subjects.command_stream), and the
actuator a durable consumer on each. Commands run `concurrency` at a time per sender: one pull
subscriber of each durable consumer runs that many handlers at once, each handling its message to
the end, so "bounded in flight" is a number in the configuration (the API client's qps and burst
bound the writes of all of them together). (It was one subscriber per handler: 32 pull requests
with heartbeats, advisory reads and consumer checks cost an idle actuator about 5 % of a core, NATS
as much again.)
Only the leaseholder consumes; a standby keeps its API client and policy loaded and takes over
when the lease passes to it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from kubernetes_asyncio.client import ApiClient
from opentelemetry import trace
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry, Counter, Gauge

from corral_actuator.actuator import Actuator
from corral_actuator.addressing import id_mismatch, subject_mismatch
from corral_actuator.api import KubeApi, RetryPolicy
from corral_actuator.config import ActuatorConfig, policy_file
from corral_actuator.conflicts import ConflictRetry
from corral_actuator.kinds import resolve_kind
from corral_actuator.limiter import rate_limiter
from corral_actuator.locks import KeyedLocks
from corral_actuator.policy import Policy
from corral_actuator.record import CommandRecord
from corral_actuator.settings import SettingValues
from corral_actuator.terms import LeaseRevisions
from corral_actuator.tracing import command_span, describe_command, describe_result, publish_span
from corral_bus import (
    MSG_ID_HEADER,
    Bus,
    Consumer,
    ConsumerSpec,
    Delivery,
    PermanentError,
    TransientError,
    inject_trace,
)
from corral_bus.cancellation import cancel_and_wait
from corral_kube.client import api_client
from corral_model import codec
from corral_model.envelopes import Command, CommandResult, Outcome, Verb
from corral_model.subjects import COMMAND_STREAMS, escape_token, result_subject
from corral_model.version import VERSION_HEADER, corral_version
from corral_runtime.logs import Logger
from corral_runtime.service import ServiceContext

DURABLE = "actuator"


class ActuatorMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.results = Counter(
            "corral_actuator_results",
            "Commands finished, by emitting service and outcome.",
            ["service", "outcome"],
            registry=registry,
        )
        self.repeats = Counter(
            "corral_actuator_repeated_commands",
            "Commands that arrived again after a copy was applied (judged again on the object).",
            registry=registry,
        )
        self.conflict_retries = Counter(
            "corral_actuator_conflict_retries",
            "Patches sent again after a 409 Conflict whose preconditions still held, by service.",
            ["service"],
            registry=registry,
        )
        self.in_flight = Gauge("corral_actuator_in_flight", "Commands being applied now.", registry=registry)


def result_subject_for(result: CommandResult) -> str:
    info = resolve_kind(result.target.kind)
    token = info.token if info is not None else escape_token(result.target.kind.lower())
    return result_subject(escape_token(result.service), token, result.target.namespace, result.target.name)


def kube_api(api: ApiClient, config: ActuatorConfig, tracer: Tracer | None = None) -> KubeApi:
    """The actuator's write path as configured: rate limit, timeouts, retries, dry-run, tracing."""
    return KubeApi(
        api,
        rate_limiter(config.qps, config.burst),
        request_timeout=config.request_timeout_s,
        retry=RetryPolicy(attempts=config.retry_attempts, timeout=config.retry_timeout_s),
        dry_run=config.dry_run,
        tracer=tracer,
    )


async def publish_result(bus: Bus, result: CommandResult, tracer: Tracer | None = None) -> None:
    """Store a result in LH_RESULTS (waiting for the stream's ack); once per command and outcome.
    With `tracer`, under a span of its own, whose `traceparent` the message carries."""
    subject = result_subject_for(result)
    headers = {MSG_ID_HEADER: f"{result.command_id}:{result.outcome.value}", VERSION_HEADER: corral_version()}
    if tracer is None:
        await bus.js.publish(subject, codec.encode(result), headers=headers)
        return
    with publish_span(tracer, subject, headers[MSG_ID_HEADER]):
        await bus.js.publish(subject, codec.encode(result), headers=inject_trace(headers))


class CommandHandler:
    """The consumer's handler: one delivery of LH_COMMANDS to one stored CommandResult."""

    def __init__(
        self,
        bus: Bus,
        actuator: Actuator,
        *,
        record: CommandRecord | None = None,
        log: Logger | None = None,
        metrics: ActuatorMetrics | None = None,
        audit: bool = True,
        tracer: Tracer | None = None,
        lease_revisions: LeaseRevisions | None = None,
    ) -> None:
        """`tracer`: a span per command, the child of its decision's (corral_actuator.tracing).
        `lease_revisions`: where a new leader term is checked against the lease (terms.py)."""
        self.bus = bus
        self.tracer = tracer
        self.actuator = actuator
        self.record = record or CommandRecord()
        self.log = log
        self.metrics = metrics or ActuatorMetrics(CollectorRegistry())
        self.audit = audit
        self.locks = KeyedLocks()
        self.lease_revisions = lease_revisions

    async def __call__(self, delivery: Delivery) -> None:
        if self.tracer is None:
            await self._handle(delivery)
            return
        with command_span(self.tracer, delivery):
            await self._handle(delivery)

    async def _handle(self, delivery: Delivery) -> None:
        command = delivery.decode(Command)  # SchemaError: the consumer parks it in LH_DEAD
        if self.tracer is not None:
            describe_command(trace.get_current_span(), command)
        mismatch = subject_mismatch(delivery.subject, command) or id_mismatch(command)
        if mismatch is not None:
            self.actuator.security_log(command, mismatch)
            raise PermanentError(mismatch)  # the consumer parks it in LH_DEAD, with this reason
        refused = self.actuator.admit(command) or await self.fence_check(command)
        if refused is not None:
            # Not recorded: the refusal is about this copy's date or term, not its decision.
            await self.publish(refused)
            self.metrics.results.labels(refused.service, refused.outcome.value).inc()
            return
        running = self.record.running(command.id)
        if running is not None:
            # The same command is being applied by another subscriber right now: wait for it.
            self.metrics.repeats.inc()
            try:
                result = await asyncio.shield(running)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if running.cancelled() and not (task is not None and task.cancelling()):
                    raise TransientError(
                        "the first copy of this command was abandoned; retry", delay=0.1
                    ) from None
                raise
            await self.publish(result)
            return
        self.record.start(command.id)
        try:
            self.metrics.in_flight.inc()
            try:
                result = self._as_recorded(command, await self._execute(command, delivery))
            finally:
                self.metrics.in_flight.dec()
            await self.publish(result)
        except BaseException:
            self.record.abandon(command.id)
            raise
        self.record.finish(result)
        self.metrics.results.labels(result.service, result.outcome.value).inc()
        self._log(command, result)

    def _as_recorded(self, command: Command, result: CommandResult) -> CommandResult:
        """A repeat is judged on the object like any command (record.py); only a delete that finds
        its object gone is told what happened to it: the earlier copy deleted it."""
        previous = self.record.result(result.command_id)
        if previous is None:
            return result
        self.metrics.repeats.inc()
        if result.outcome is Outcome.NOT_FOUND and command.verb is Verb.DELETE:
            return msgspec.structs.replace(
                result, outcome=Outcome.APPLIED, detail="already deleted by an earlier copy of this command"
            )
        return result

    async def fence_check(self, command: Command) -> CommandResult | None:
        """A term newer than any applied one must not be beyond what the service's lease has
        reached (terms.py): a forged huge term is refused, never learnt."""
        if self.lease_revisions is None or command.term <= self.actuator.fence.newest(command.service):
            return None
        revision = await self.lease_revisions.revision(command.service)
        if revision is not None and command.term > revision:
            return self.actuator.reject(
                command,
                f"leader term {command.term} is beyond the {command.service} lease's revision {revision}:"
                " no leader has held that term",
            )
        return None

    async def _execute(self, command: Command, delivery: Delivery) -> CommandResult:
        t = command.target
        async with self.locks.hold((t.kind, t.namespace, t.name)):
            return await self.actuator.execute(command, redelivered=delivery.num_delivered > 1)

    async def publish(self, result: CommandResult) -> None:
        if self.tracer is not None:
            describe_result(trace.get_current_span(), result)
        await publish_result(self.bus, result, self.tracer)

    def _log(self, command: Command, result: CommandResult) -> None:
        if self.log is None or (result.outcome is Outcome.APPLIED and not self.audit):
            return
        fields: dict[str, Any] = {
            "command_id": command.id,
            # `service` is this log's own (the actuator); the command's issuer is the sender
            "sender": command.service,
            "verb": command.verb.value,
            "kind": command.target.kind,
            "namespace": command.target.namespace,
            "name": command.target.name,
            "outcome": result.outcome.value,
            "resource_version": result.resource_version,
            "dry_run": result.dry_run,
        }
        if result.outcome is Outcome.ERROR:
            self.log.warning("command failed", detail=result.detail, **fields)
        elif result.outcome is not Outcome.REJECTED_BY_POLICY:  # those were logged as security events
            self.log.info("command finished", detail=result.detail, **fields)


def consumer_spec(config: ActuatorConfig, stream: str) -> ConsumerSpec:
    """The durable consumer on one sender's command stream (corral_model.subjects.command_stream)."""
    return ConsumerSpec(
        stream=stream,
        durable=DURABLE,
        backoff=(0.5, 2.0, 10.0),
        max_deliver=config.max_deliver,
        ack_wait=config.ack_wait_s,
        max_ack_pending=max(256, 4 * config.concurrency * config.fetch_batch),
        batch=config.concurrency * config.fetch_batch,
        concurrency=config.concurrency,
        fetch_wait=0.5,
        description="corral actuator: applies commands to the API server",
        process_span=False,  # the handler's command span is the decision span's child
    )


def security_logger(log: Logger) -> Any:
    def security_event(command: Command, reason: str) -> None:
        log.warning(
            "command rejected by policy",
            security=True,
            command_id=command.id,
            sender=command.service,
            verb=command.verb.value,
            kind=command.target.kind,
            namespace=command.target.namespace,
            name=command.target.name,
            changes=[c.path for c in command.changes],
            reason=reason,
        )

    return security_event


async def main(ctx: ServiceContext[ActuatorConfig]) -> None:
    """The actuator service: see the module docstring. Returns once `ctx.stop` is set and work drained."""
    config = ctx.config
    policy = Policy.load(policy_file(config))
    metrics = ActuatorMetrics(ctx.metrics)
    api = await api_client(config.kubeconfig or None, max_connections=config.max_connections)
    kube: KubeApi | None = None
    actuator: Actuator | None = None
    try:
        kube = kube_api(api, config, ctx.tracer)
        actuator = Actuator(
            kube,
            policy,
            settings=SettingValues(kube, ttl=config.settings_ttl_s),
            security_log=security_logger(ctx.log),
            max_command_age=config.max_command_age_s,
            max_clock_skew=config.max_clock_skew_s,
            conflict_retry=ConflictRetry(
                attempts=config.conflict_retries, wait_initial=config.conflict_wait_s
            ),
            on_conflict_retry=lambda command: metrics.conflict_retries.labels(command.service).inc(),
            tracer=ctx.tracer,
            engine_upgrade_limit=config.per_node_limit,
        )
        handler = CommandHandler(
            ctx.bus,
            actuator,
            record=CommandRecord(config.recent_commands),
            log=ctx.log,
            metrics=metrics,
            audit=config.audit_log,
            tracer=ctx.tracer,
            lease_revisions=LeaseRevisions(ctx.bus),
        )
        ctx.readiness.mark("policy")
        ctx.log.info(
            "actuator ready",
            policy=str(policy_file(config)),
            dry_run=config.dry_run,
            qps=config.qps,
            burst=config.burst,
            concurrency=config.concurrency,
        )
        await _lead(ctx, handler)
    finally:
        if actuator is not None:
            await actuator.close()
        if kube is not None:
            await kube.close()
        await api.close()


async def _wait_any(*aws: Any) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(*tasks)


async def _all_ready(consumers: list[Consumer]) -> None:
    await asyncio.gather(*(consumer.ready.wait() for consumer in consumers))


async def _lead(ctx: ServiceContext[ActuatorConfig], handler: CommandHandler) -> None:
    """Consume while leading; on losing the lease or on stop, drain and (if not stopping) stand by."""
    config = ctx.config
    leadership = ctx.leadership
    lost = asyncio.Event()
    if leadership is not None:
        leadership.on_change(lambda leader: None if leader else lost.set())
    while not ctx.stop.is_set():
        if leadership is not None and not leadership.is_leader:
            ctx.log.info("standing by for the actuator lease")
            await _wait_any(leadership.wait_leader(), ctx.stop.wait())
            if ctx.stop.is_set():
                return
        lost.clear()
        consumers = [Consumer(ctx.bus, consumer_spec(config, stream), handler) for stream in COMMAND_STREAMS]
        for consumer in consumers:
            consumer.start()
        if leadership is not None and not leadership.is_leader:
            lost.set()
        await _wait_any(_all_ready(consumers), ctx.stop.wait(), lost.wait())
        if not (ctx.stop.is_set() or lost.is_set()):
            streams, per_sender = list(COMMAND_STREAMS), config.concurrency
            ctx.log.info("consuming commands", durable=DURABLE, streams=streams, concurrency=per_sender)
            await _wait_any(ctx.stop.wait(), lost.wait())
        ctx.log.info("draining in-flight commands", lost_lease=lost.is_set())
        await asyncio.gather(*(consumer.stop(config.shutdown_grace_s) for consumer in consumers))
