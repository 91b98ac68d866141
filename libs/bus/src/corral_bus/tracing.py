"""W3C trace context across the bus: injected into headers on publish, extracted on consume.

A decision made from an event and the command it produced share one trace, so a slow upgrade can
be followed from the watcher through the decider to the actuator. Uses only the OpenTelemetry API:
with no SDK configured everything here is a cheap no-op apart from carrying the header along.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate
from opentelemetry.context import Context

TRACEPARENT = "traceparent"


def inject_trace(headers: dict[str, str], context: Context | None = None) -> dict[str, str]:
    """Add `traceparent` (and `tracestate` when present) of `context` (default: the current one)
    to `headers`."""
    propagate.inject(headers, context=context)
    return headers


def extract_trace(headers: Mapping[str, str] | None) -> Context:
    """The context a message was published under (an empty context when it carries none)."""
    return propagate.extract(dict(headers) if headers else {})
