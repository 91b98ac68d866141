"""OpenTelemetry set-up: spans exported over OTLP/HTTP when a collector is configured, else none at all.

The bus carries W3C `traceparent` headers from the watcher through a decision service to the actuator,
so one decision is one trace across processes (`corral_bus.tracing`). Exporting is opt-in through the
standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) variable. With neither set, no
tracer provider is installed and services get no tracer: their hot paths (an event per watch line,
an event per decider apply) then make no span object at all, which a span that is merely not exported
would still cost. A message that arrives with a `traceparent` is still handled in its publisher's
context (the API's no-op tracer passes it through), so log lines carry its ids and a command
published from it carries it on.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def exporting(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment names an OTLP collector to send spans to."""
    env = os.environ if environ is None else environ
    return any(env.get(name) for name in _ENDPOINT_VARIABLES)


def traces_endpoint(environ: Mapping[str, str] | None = None) -> str | None:
    """The URL spans are posted to: the traces variable as given, or `/v1/traces` under the base one
    (as the OTLP/HTTP exporter itself resolves them; resolved here so `environ` can be passed in)."""
    env = os.environ if environ is None else environ
    if env.get(_ENDPOINT_VARIABLES[0]):
        return env[_ENDPOINT_VARIABLES[0]]
    base = env.get(_ENDPOINT_VARIABLES[1])
    return f"{base.rstrip('/')}/v1/traces" if base else None


def service_resource(service: str, instance: str = "") -> Resource:
    """What every span of `service` says about where it comes from (`corral-<service>`)."""
    attributes = {"service.name": f"corral-{service}" if service else "corral", "service.namespace": "corral"}
    if instance:
        attributes["service.instance.id"] = instance
    return Resource.create(attributes)


def install_propagator() -> None:
    """W3C trace context (and baggage) on every publish and consume, whatever the provider."""
    w3c = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    propagate.set_global_textmap(w3c)


def configure_tracing(
    service: str, instance: str = "", environ: Mapping[str, str] | None = None, *, install: bool = True
) -> TracerProvider | None:
    """A tracer provider exporting `service`'s spans to the configured collector, or None when no
    collector is configured (then nothing records spans). With `install`, it also becomes the
    process-wide provider (which the bus library's own spans use), and the W3C propagator is set.

    The global provider can be set only once per process; a later call returns a fresh provider
    without replacing the first.
    """
    if install:
        install_propagator()
    if not exporting(environ):
        return None
    provider = TracerProvider(resource=service_resource(service, instance))
    # Imported lazily: the exporter pulls in protobuf and requests, unneeded when nothing is sent.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_endpoint(environ))))
    if install and not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(provider)
    return provider
