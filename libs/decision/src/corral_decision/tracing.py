"""The decision span: one per command, in the trace of the event that led to it.

The watcher starts a trace per change it publishes to LH_OBJECTS (its span's id rides in the
message's `traceparent` header). The runner decides once per burst of events, and `decide()` does
not say which event made which command, so the runner picks the parent by a fixed rule:

* the command's own target's latest event in the burst, when it has one (a change to the object the
  command is about: one volume's story stays in one trace);
* otherwise the last event applied before the decision, the one that woke the decider (a volume
  finishing its upgrade frees the slot another volume is then commanded into; the setting that
  names a new default image starts a whole wave), and that event is a span link as well when the
  target's own event is the parent, so "why now" is one click away either way;
* a decision with no traced event before it (a timer of the decider, a replica's first round on the
  view it bootstrapped from LH_OBJECTS's last message per object) starts a trace of its own.

Parenting rather than linking keeps watcher → decider → actuator one trace, which is what an operator
follows; the other events of a burst are not linked (a 50-event burst would hang 50 links on every
command). The span starts when its parent event was applied and ends once the command is stored in
LH_COMMANDS, with the command's id, target, reason, changes and preconditions as attributes (and
which event it was parented on: `corral.trigger` = target / event / none); the
command's message carries its `traceparent`, so the actuator's span is its child.

Made only when the service has a tracer: without one the runner keeps no trace state at all, and
with one it remembers a header string and a clock reading per traced event, not a span.
"""

from __future__ import annotations

import json
import time
from collections.abc import Collection

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer

from corral_bus import StreamMessage
from corral_bus.tracing import TRACEPARENT, extract_trace
from corral_model.envelopes import Command, FieldValue

_OBJECT_SUBJECT_TOKENS = 2  # lh.obj.<kind>.<ns>.<name>: the object key starts after two tokens
_COMMAND_SUBJECT_TOKENS = 3  # lh.cmd.<service>.<kind>.<ns>.<name>: after three


def _object_key(subject: str, skip: int) -> str:
    """`<kind>.<ns>.<name>` of an object or command subject: the same key for an object and the
    commands on it."""
    return subject.split(".", skip)[skip]


class _Traced:
    """One traced event: its `traceparent` and when it was applied (ns since the epoch)."""

    __slots__ = ("applied_ns", "key", "traceparent")

    def __init__(self, key: str, traceparent: str, applied_ns: int) -> None:
        self.key = key
        self.traceparent = traceparent
        self.applied_ns = applied_ns


def describe(values: tuple[FieldValue, ...]) -> list[str]:
    """`path = json value` per field: how a command's changes and preconditions read in a trace."""
    return [f"{v.path} = {json.dumps(v.value, sort_keys=True, default=str)}" for v in values]


class DecisionBatch:
    """The traced events one decision was made from, and the spans of the commands it published."""

    def __init__(self, tracer: Tracer, events: dict[str, _Traced], last: _Traced | None) -> None:
        self._tracer = tracer
        self._events = events
        self._last = last
        self._decided_ns = time.time_ns()
        self._spans: dict[str, Span] = {}

    def start(self, command: Command, subject: str) -> Span:
        """The span of `command`, published on `subject` (see the module docstring for its parent)."""
        own = self._events.get(_object_key(subject, _COMMAND_SUBJECT_TOKENS))
        parent = own or self._last
        links = []
        if own is not None and self._last is not None and self._last is not own:
            links.append(Link(trace.get_current_span(self._context(self._last)).get_span_context()))
        t = command.target
        span = self._tracer.start_span(
            f"decide {t.kind}",
            context=self._context(parent) if parent is not None else None,
            kind=SpanKind.PRODUCER,
            links=links,
            start_time=parent.applied_ns if parent is not None else self._decided_ns,
            # What an operator asks of a decision, and no more: the SDK checks every attribute.
            attributes={
                "corral.command.id": command.id,
                "corral.target": f"{t.kind}/{t.namespace}/{t.name}",
                "corral.reason": command.reason,
                "corral.changes": describe(command.changes),
                "corral.preconditions": describe(command.preconditions),
                "corral.trigger": "target"
                if own is not None
                else ("event" if parent is not None else "none"),
                "corral.trigger.object": parent.key if parent is not None else "",
            },
        )
        span.add_event("decided", timestamp=self._decided_ns)
        self._spans[command.id] = span
        return span

    def not_stored(self, command_ids: Collection[str]) -> None:
        """JetStream did not store these commands: their spans say so."""
        for command_id in command_ids:
            span = self._spans.get(command_id)
            if span is not None:
                span.set_status(Status(StatusCode.ERROR, "not stored in LH_COMMANDS"))

    def end(self) -> None:
        """The commands are stored in LH_COMMANDS (or given up): their spans end."""
        for span in self._spans.values():
            span.end()
        self._spans.clear()

    @staticmethod
    def _context(event: _Traced) -> Context:
        return extract_trace({TRACEPARENT: event.traceparent})


class DecisionTraces:
    """The traced events applied since the last decision, by object; `take` hands them to one."""

    __slots__ = ("_events", "_last", "_tracer")

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._events: dict[str, _Traced] = {}
        self._last: _Traced | None = None

    def applied(self, message: StreamMessage) -> None:
        """`message`'s event was applied to the view (a no-op for an untraced one, and for the
        snapshot a replica bootstraps from: those changes were decided on when they happened)."""
        traceparent = message.headers.get(TRACEPARENT)
        if traceparent and not message.bootstrap:
            key = _object_key(message.subject, _OBJECT_SUBJECT_TOKENS)
            self._events[key] = self._last = _Traced(key, traceparent, time.time_ns())

    def take(self) -> DecisionBatch:
        """The events since the last decision, for the one being made now; forgotten here."""
        batch = DecisionBatch(self._tracer, self._events, self._last)
        self.forget()
        return batch

    def forget(self) -> None:
        """Nothing was decided from them (a standby, no command): the next decision starts afresh."""
        if self._events:
            self._events = {}
        self._last = None
