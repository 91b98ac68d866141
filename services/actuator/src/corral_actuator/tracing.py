"""The actuator's part of a decision's trace: the command's last hop, a child of the decision span.

A command's `traceparent` names the span of the decision that made it (corral_decision.tracing), so
the actuator's span for it is that span's child, and one trace reads watcher → decider → actuator.
Its span covers the whole command (decode, admission, policy, write, result) and says what came of
it; inside it, three kinds of child span show where the time went:

* `policy check`: the verdict of the actuator's policy (allowed or why not);
* one per API request (`PATCH volumes`, `GET volumes`…), with the HTTP status the API server answered
  (after retries, which are counted), so a refused `test` (422) or a conflict (409) is visible;
* `publish lh.res`: the result stored in LH_RESULTS, whose message carries the trace on.

Only made when the actuator has a tracer (a collector is configured): without one, no span and no
attribute is made and the hooks cost one `is None` test per command or request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from corral_bus import Delivery
from corral_model.envelopes import Command, CommandResult, Outcome

# Outcomes that mean the command could not be carried out for a reason worth an error status.
_FAILED = frozenset({Outcome.ERROR, Outcome.REJECTED_BY_POLICY})


@contextlib.contextmanager
def command_span(tracer: Tracer, delivery: Delivery) -> Iterator[Span]:
    """The span of one delivered command: a child of the span its `traceparent` names."""
    with tracer.start_as_current_span(
        "actuate command",
        context=delivery.trace_context,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": delivery.subject,
            "messaging.message.id": delivery.msg_id,
            "messaging.message.delivery_count": delivery.num_delivered,
        },
    ) as span:
        yield span


def describe_command(span: Span, command: Command) -> None:
    """What the command asks, on its span (once it decoded)."""
    t = command.target
    span.update_name(f"actuate {command.verb} {t.kind}")
    span.set_attributes(
        {
            "corral.service": command.service,
            "corral.command.id": command.id,
            "corral.command.verb": str(command.verb),
            "corral.target": f"{t.kind}/{t.namespace}/{t.name}",
            "corral.lease_term": command.term,
        }
    )


def describe_result(span: Span, result: CommandResult) -> None:
    """What came of the command, on its span."""
    span.set_attribute("corral.outcome", str(result.outcome))
    if result.detail:
        span.set_attribute("corral.detail", result.detail)
    if result.resource_version:
        span.set_attribute("corral.resource_version", result.resource_version)
    if result.outcome in _FAILED:
        span.set_status(Status(StatusCode.ERROR, f"{result.outcome}: {result.detail}"[:200]))


@contextlib.contextmanager
def policy_span(tracer: Tracer) -> Iterator[Span]:
    with tracer.start_as_current_span("policy check") as span:
        yield span


def resource_of(path: str) -> str:
    """The resource a Kubernetes API path addresses (`volumes`, `pods`…): a span name that does not
    grow with every object."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if "namespaces" in parts:
        at = parts.index("namespaces") + 2
        return parts[at] if at < len(parts) else "namespaces"
    at = 2 if parts[0] == "api" else 3  # /api/v1/<resource>, /apis/<group>/<version>/<resource>
    return parts[at] if at < len(parts) else path


@contextlib.contextmanager
def request_span(tracer: Tracer, method: str, path: str, dry_run: bool) -> Iterator[Span]:
    """One API request (with its retries); the caller sets `http.response.status_code`."""
    with tracer.start_as_current_span(
        f"{method} {resource_of(path)}",
        kind=SpanKind.CLIENT,
        attributes={"http.request.method": method, "url.path": path, "corral.dry_run": dry_run},
    ) as span:
        yield span


@contextlib.contextmanager
def publish_span(tracer: Tracer, subject: str, msg_id: str) -> Iterator[Span]:
    with tracer.start_as_current_span(
        "publish lh.res",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "messaging.message.id": msg_id,
        },
    ) as span:
        yield span
