"""The harness every corral service's `__main__` runs: set-up, the service's own loop, clean shutdown.

A service is one coroutine, `main(ctx)`, that works until `ctx.stop` is set and then returns. The
harness owns everything around it, in the same order for every service: configuration, JSON logs,
tracing, the health server, the NATS connection, the optional leader lease, and on SIGTERM the
orderly way out (main finishes or naks its in-flight work within the grace period, then the lease is
released so a standby takes over at once, then the connection is drained). Exit codes: 0 after a
requested stop or a main that returned, 1 when main failed, 2 for bad configuration, 130 when a
second signal cut the grace period short.

A service that finds the streams missing or not yet as the contract says (the setup step, the
chart's bus-init Job, has not run yet) does not exit: it stays alive and unready, says once what
it waits for, and checks again with a growing pause until they are there. So a `helm install
--wait` or a GitOps sync, which starts the Job and the services together, converges by itself.

    from corral_runtime import ServiceConfig, ServiceContext, run_service

    async def main(ctx: ServiceContext[ServiceConfig]) -> None:
        ...  # consume with ctx.bus until ctx.stop is set; ctx.readiness.mark("bootstrap") when ready

    if __name__ == "__main__":
        raise SystemExit(
            run_service("engine-upgrade", ServiceConfig, main, leader_election=True, ready_when=["bootstrap"])
        )
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import msgspec
import uvloop
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from corral_bus.auth import CredentialsError, NatsAuth, check_url, redact_url
from corral_bus.cancellation import cancel_and_wait
from corral_bus.connection import Bus, connect
from corral_bus.errors import StreamConfigError
from corral_bus.streams import StreamSettings, check_streams
from corral_runtime.config import ConfigError, ServiceConfig, load_config, unknown_variables
from corral_runtime.health import HealthServer, Readiness
from corral_runtime.leadership import Leadership
from corral_runtime.logs import Logger, configure_logging
from corral_runtime.metrics import ServiceMetrics, new_registry
from corral_runtime.shutdown import StopSignals
from corral_runtime.startup import StartupHook
from corral_runtime.tracing import configure_tracing

ConfigT = TypeVar("ConfigT", bound=ServiceConfig)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_CONFIG = 2
EXIT_FORCED = 130


@dataclass(eq=False)
class ServiceContext(Generic[ConfigT]):
    """What `main` gets: its configuration and the shared plumbing, already connected."""

    name: str
    config: ConfigT
    bus: Bus
    log: Logger
    tracer: Tracer | None
    """Records spans when a collector is configured (corral_runtime.tracing); None otherwise, and
    then a service's hot paths make no span at all."""
    metrics: CollectorRegistry
    """Register the service's own collectors here (`Counter(..., registry=ctx.metrics)`)."""
    readiness: Readiness
    """`nats` is probed by the harness; `main` declares and marks its own conditions (`bootstrap`)."""
    stop: asyncio.Event
    """Set when the service must stop taking work; `main` returns once its in-flight work is done."""
    leadership: Leadership | None
    """Present when the service runs with `leader_election=True`: only the leader issues commands.
    The replica campaigns once its `ready_when` conditions are marked; register `on_change`
    callbacks before marking them and no gain of leadership is missed."""

    @property
    def is_leader(self) -> bool:
        """True when this replica may act: it holds the lease, or the service does not elect one."""
        return self.leadership is None or self.leadership.is_leader

    async def wait_stop(self, seconds: float | None = None) -> bool:
        """Wait until stop is requested or `seconds` pass; True when stopping (for periodic loops)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stop.wait(), seconds)
        return self.stop.is_set()


ServiceMain = Callable[[ServiceContext[ConfigT]], Awaitable[None]]


def default_instance() -> str:
    """hostname-pid: the pod name in Kubernetes, and still unique for replicas sharing a host."""
    return f"{socket.gethostname()}-{os.getpid()}"


def run_service(
    name: str,
    config_cls: type[ConfigT],
    main: ServiceMain[ConfigT],
    *,
    leader_election: bool = False,
    ready_when: Sequence[str] = (),
    startup: Sequence[StartupHook] = (),
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run `main` as the service `name` until it returns or a stop signal has been handled.

    `ready_when` names the readiness conditions `main` marks itself (`ctx.readiness.mark("bootstrap")`);
    they are declared before the health server starts, so /readyz never answers 200 too early.
    `startup` hooks (e.g. the upgrade-path gate, `corral_upgradepath.hooks.bus_gate`) run before
    `main`, in order; the first that refuses exits 1 without `main` ever running.
    """
    try:
        config = load_config(config_cls, environ=environ)
    except ConfigError as exc:
        print(f"corral-{name}: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    config = msgspec.structs.replace(
        config, service=config.service or name, instance=config.instance or default_instance()
    )
    try:
        check_url(config.nats_url)
        nats_auth(config)
    except CredentialsError as exc:
        print(f"corral-{name}: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_BAD_CONFIG
    # What the process imported and configured lives as long as it does: frozen, the collector's
    # full passes never walk it again. Unfrozen, a full pass came during start-up and the runner's
    # after its bootstrap walked it all: 50-100 ms of engine-upgrade's 100 k cold start (issue 28).
    # Here, not in `serve`, which tests run many times in one process.
    gc.freeze()
    try:
        # uvloop: its C transports cost less CPU per message and per request than asyncio's own
        # loop (a tenth less per event in bench_watcher, and a decision service's loop wakes for
        # every batch it pulls), which is the budget of every corral service.
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(
                serve(
                    config,
                    main,
                    leader_election=leader_election,
                    ready_when=ready_when,
                    startup=startup,
                    environ=environ,
                )
            )
    except asyncio.CancelledError:  # a second stop signal landed while closing down
        return EXIT_FORCED


async def serve(
    config: ConfigT,
    main: ServiceMain[ConfigT],
    *,
    leader_election: bool = False,
    ready_when: Sequence[str] = (),
    startup: Sequence[StartupHook] = (),
    environ: Mapping[str, str] | None = None,
    tracer_provider: TracerProvider | None = None,
) -> int:
    """The body of `run_service` for a loaded configuration; usable from a running event loop.

    `tracer_provider`: where the service's spans go instead of the configured collector (a test's
    in-memory exporter); the caller owns it (it is not shut down here)."""
    name = config.service
    log = configure_logging(name, config.log_level).bind(instance=config.instance)
    provider = configure_tracing(name, config.instance, environ) if tracer_provider is None else None
    spans = tracer_provider or provider
    registry = new_registry()
    gauges = ServiceMetrics(registry, name, config.instance)
    readiness = Readiness("nats", *ready_when)
    stop = asyncio.Event()
    forced = _ForcedStop(asyncio.current_task())
    health = HealthServer(readiness, registry, config.health_host, config.health_port)
    held = _Held()
    with StopSignals(stop, forced.fire) as signals:
        try:
            await health.start()
            _say_starting(config, health, log, environ)
            bus = await _bus_when_set_up(config, stop, log, signals, held)
            if bus is None:
                return EXIT_OK
            if not await _startup_checks_pass(bus, config, startup, log):
                return EXIT_FAILED
            _follow_the_connection(bus, readiness, gauges)
            if leader_election:
                held.leadership, held.campaign = _stand_for_leader(bus, config, readiness, gauges, log)
            tracer = spans.get_tracer(f"corral.{name}") if spans is not None else None
            ctx = ServiceContext(name, config, bus, log, tracer, registry, readiness, stop, held.leadership)
            return await _run_main(ctx, main, config.shutdown_grace_s, signals)
        except asyncio.CancelledError:
            if not forced.fired:
                raise
            log.warning("second stop signal: cancelled without waiting for in-flight work")
            return EXIT_FORCED
        except Exception:
            log.exception("service could not start")
            return EXIT_FAILED
        finally:
            stop.set()
            await cancel_and_wait(held.campaign)
            await _close(held.leadership, held.bus, health, log)
            if provider is not None:
                provider.shutdown()  # exports what is still queued


class _ForcedStop:
    """A second stop signal: cancel the harness itself, without waiting for in-flight work."""

    def __init__(self, harness: asyncio.Task[object] | None) -> None:
        self._harness = harness
        self.fired = False

    def fire(self) -> None:
        self.fired = True
        if self._harness is not None:
            self._harness.cancel()


@dataclass(eq=False)
class _Held:
    """What `serve` has opened so far, so its way out closes exactly that, in order."""

    bus: Bus | None = None
    leadership: Leadership | None = None
    campaign: asyncio.Future[None] | None = None


def _say_starting(
    config: ServiceConfig, health: HealthServer, log: Logger, environ: Mapping[str, str] | None
) -> None:
    log.info(
        "service starting",
        health_port=health.port,
        nats_url=redact_url(config.nats_url),
        nats_user=config.nats_user or "(anonymous)",
    )
    for unknown in unknown_variables(type(config), environ=environ):
        log.warning("unknown configuration variable", problem=unknown)


async def _startup_checks_pass(
    bus: Bus, config: ServiceConfig, startup: Sequence[StartupHook], log: Logger
) -> bool:
    """Run the start-up hooks (the upgrade-path gate) in order; False at the first refusal."""
    for hook in startup if config.upgrade_gate else ():
        verdict = await hook(bus, config)
        if not verdict.allowed:
            log.error("start-up check refused: not starting", summary=verdict.summary())
            return False
        log.info("start-up check passed", summary=verdict.summary())
    return True


def _follow_the_connection(bus: Bus, readiness: Readiness, gauges: ServiceMetrics) -> None:
    """Readiness and the gauges follow the NATS connection from here on."""
    readiness.probe("nats", lambda: bus.is_connected)
    gauges.ready.set_function(lambda: float(readiness.ready))
    gauges.nats_connected.set_function(lambda: float(bus.is_connected))


def _stand_for_leader(
    bus: Bus, config: ServiceConfig, readiness: Readiness, gauges: ServiceMetrics, log: Logger
) -> tuple[Leadership, asyncio.Future[None]]:
    """The leader lease of this replica, and its campaign (which waits for a warm view)."""
    leadership = Leadership(
        bus, config.service, config.instance, config.lease_ttl_s, log, replicas=config.nats_replicas
    )
    gauges.leader.set_function(lambda: float(leadership.is_leader))
    return leadership, asyncio.ensure_future(_campaign(readiness, leadership, log))


async def _bus_when_set_up(
    config: ServiceConfig, stop: asyncio.Event, log: Logger, signals: StopSignals, held: _Held
) -> Bus | None:
    """The NATS connection once the streams are as the contract says; None when a stop came first.
    A connection made is in `held` at once, so the caller's way out closes it either way."""
    bus = held.bus = await _connect_unless_stopped(config, stop)
    if bus is None:
        log.info("stopped before NATS answered", signal=_signal_name(signals))
        return None
    # The setup step made the streams (corral bus init); on an open server whichever service
    # starts first does (corral_bus.streams.check_streams).
    if not await _streams_when_set_up(bus, config, stop, log):
        log.info("stopped while waiting for the streams", signal=_signal_name(signals))
        return None
    return bus


STREAM_RETRY_FIRST_S, STREAM_RETRY_MAX_S = 0.5, 10.0


async def _streams_when_set_up(bus: Bus, config: ServiceConfig, stop: asyncio.Event, log: Logger) -> bool:
    """Check the streams until they are as the contract says (True) or a stop comes first (False);
    the first failure is a warning that says what to run, later ones only debug lines. A
    configuration the server itself refuses (three replicas on one server) is raised: the service
    says so and does not start."""
    pause = STREAM_RETRY_FIRST_S
    said = ""
    while True:
        try:
            await check_streams(bus.js, StreamSettings(replicas=config.nats_replicas))
        except StreamConfigError as e:
            if e.refused:
                raise  # the server refused the contract's configuration: waiting cannot mend it
            if not said:
                log.warning("waiting for the streams; unready until they are set up", reason=str(e))
            else:
                log.debug("streams still not set up", reason=str(e))
            said = str(e)
        else:
            if said:
                log.info("streams set up; going on")
            return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(pause):
                await stop.wait()
        if stop.is_set():
            return False
        pause = min(pause * 2, STREAM_RETRY_MAX_S)


def nats_auth(config: ServiceConfig) -> NatsAuth:
    """The service's NATS identity from its configuration (CredentialsError when unusable)."""
    return NatsAuth.from_settings(
        user=config.nats_user,
        password=config.nats_password,
        password_file=config.nats_password_file,
        tls_ca=config.nats_tls_ca,
        tls_cert=config.nats_tls_cert,
        tls_key=config.nats_tls_key,
    )


async def _connect_unless_stopped(config: ServiceConfig, stop: asyncio.Event) -> Bus | None:
    connecting = asyncio.ensure_future(
        connect(
            config.nats_url,
            name=f"{config.service}/{config.instance}",
            ping_interval=config.nats_ping_interval_s,
            auth=nats_auth(config),
        )
    )
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({connecting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if connecting.done():
        return connecting.result()
    # nats-py's connect loop swallows a cancellation that lands while it tears down a failed
    # attempt, so one cancel() is not enough: repeat until the attempt is really over.
    while not connecting.done():
        connecting.cancel()
        await asyncio.wait({connecting}, timeout=0.1)
    if not connecting.cancelled() and connecting.exception() is None:
        await connecting.result().close()
    return None


async def _campaign(readiness: Readiness, leadership: Leadership, log: Logger) -> None:
    # A replica campaigns only once its view is warm (its `ready_when` conditions are marked):
    # a leader deciding from a half-built view could exceed a node's limit.
    await readiness.wait_marked()
    delay = 0.5
    while True:
        try:
            await leadership.start()
            return
        except Exception as exc:
            log.warning("cannot open the leader lease yet; retrying", error=str(exc), retry_s=delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 10.0)


async def _run_main(
    ctx: ServiceContext[ConfigT], main: ServiceMain[ConfigT], grace_s: float, signals: StopSignals
) -> int:
    work = asyncio.ensure_future(main(ctx))
    stopping = asyncio.ensure_future(ctx.stop.wait())
    try:
        await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if not work.done():
        ctx.log.info("stopping: finishing in-flight work", signal=_signal_name(signals), grace_s=grace_s)
        done, _ = await asyncio.wait({work}, timeout=grace_s)
        if not done:
            ctx.log.warning("grace period over: cancelling in-flight work", grace_s=grace_s)
            work.cancel()
            # asyncio.wait, not await: a cancellation of the harness itself (second signal) must
            # propagate, and a main that swallows its cancellation must not hold the exit forever.
            await asyncio.wait({work}, timeout=5.0)
            return EXIT_OK
    if work.cancelled():
        return EXIT_OK
    error = work.exception()
    if error is not None:
        ctx.log.error("service failed", exc_info=error)
        return EXIT_FAILED
    ctx.log.info("service stopped")
    return EXIT_OK


async def _close(leadership: Leadership | None, bus: Bus | None, health: HealthServer, log: Logger) -> None:
    # Each step runs even when an earlier one fails: a lease left behind costs the standby a full TTL.
    if leadership is not None:
        try:
            await leadership.close()
        except Exception:
            log.exception("releasing the leader lease failed")
    if bus is not None:
        try:
            await bus.close()
        except Exception:
            log.exception("closing the NATS connection failed")
    await health.stop()


def _signal_name(signals: StopSignals) -> str | None:
    return signals.received.name if signals.received is not None else None
