"""OpenTelemetry set-up: spans exported over OTLP/HTTP when a collector is configured, else kept local.

The bus carries W3C `traceparent` headers from the watcher through a decision service to the actuator,
so one upgrade step is one trace across processes. Exporting is opt-in through the standard
`OTEL_EXPORTER_OTLP_ENDPOINT` (or `..._TRACES_ENDPOINT`) variable: with neither set, spans are still
created (logs carry their ids) but nothing is sent anywhere and no exporter thread runs.
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


def configure_tracing(
    service: str, instance: str = "", environ: Mapping[str, str] | None = None, *, install: bool = True
) -> TracerProvider:
    """A tracer provider for `service`; with `install`, also the process-wide provider and W3C propagator.

    The global provider can be set only once per process; a later call returns a fresh provider
    without replacing the first.
    """
    attributes = {"service.name": f"corral-{service}" if service else "corral", "service.namespace": "corral"}
    if instance:
        attributes["service.instance.id"] = instance
    provider = TracerProvider(resource=Resource.create(attributes))
    if exporting(environ):
        # Imported lazily: the exporter pulls in protobuf and requests, unneeded when nothing is sent.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    if install:
        if not isinstance(trace.get_tracer_provider(), TracerProvider):
            trace.set_tracer_provider(provider)
        propagate.set_global_textmap(
            CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
        )
    return provider
