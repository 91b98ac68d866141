"""Where a decision's trace begins: one span per watched change, from its arrival to its publish.

The watcher is the first of the three services a decision crosses, so its span is the root of the
trace: it starts when the change came off the watch stream (the batch's observation time), carries
the object's identity, and ends once its message is written to LH_OBJECTS; the message's
`traceparent` header names it, so the decision service's span can be its child. Changes found by a
(re)list are not traced: a list is the watcher's repair, not a change it received, and the first
list of a large cluster would start a trace per object. Only made when the service has a tracer
(a collector is configured); otherwise the watch loop never reaches this module.
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Tracer

from corral_bus.tracing import inject_trace
from corral_model.envelopes import EventType
from corral_model.longhorn import ObjectMeta
from corral_watcher.events import Message


class ChangeSpans:
    """The open spans of one kind's current watch batch; `end_all` once the batch is written."""

    __slots__ = ("_kind", "_name", "_open", "_tracer")

    def __init__(self, tracer: Tracer, kind: str) -> None:
        self._tracer = tracer
        self._kind = kind
        self._name = f"publish lh.obj.{kind}"
        self._open: list[Span] = []

    def traced(self, message: Message, event_type: EventType, meta: ObjectMeta, observed: float) -> Message:
        """`message` with the `traceparent` of a new span for its change (started at `observed`)."""
        subject, payload, msg_id, headers = message
        # Few attributes: the SDK checks each one, and this runs for every change the watcher sees.
        span = self._tracer.start_span(
            self._name,
            kind=SpanKind.PRODUCER,
            start_time=int(observed * 1e9),
            attributes={
                "corral.object": f"{self._kind}/{meta.namespace}/{meta.name}",
                "corral.event": str(event_type),
                "corral.resource_version": meta.resource_version,
            },
        )
        self._open.append(span)
        # Copied: a tombstone's headers are one dict shared by every tombstone of the kind.
        carried = inject_trace(dict(headers) if headers else {}, trace.set_span_in_context(span))
        return subject, payload, msg_id, carried

    def end_all(self) -> None:
        """The batch is written to NATS (or abandoned): its spans end now."""
        for span in self._open:
            span.end()
        self._open.clear()
