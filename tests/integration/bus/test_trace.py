"""Trace context survives a hop: the handler runs in the trace the message was published under."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from corral_bus import Bus, Consumer, ConsumerSpec, Delivery, Publisher
from corral_model import subjects
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration

SENDER = "engine-upgrade"
COMMANDS = subjects.command_stream(SENDER)


async def test_consumer_sees_the_publishers_trace(bus: Bus) -> None:
    tracer = TracerProvider().get_tracer("test")
    seen: list[tuple[int, int, str]] = []

    async def handle(delivery: Delivery) -> None:
        current = trace.get_current_span().get_span_context()
        carried = trace.get_current_span(delivery.trace_context).get_span_context()
        seen.append((current.trace_id, carried.trace_id, delivery.headers.get("traceparent", "")))

    publisher = Publisher(bus)
    with tracer.start_as_current_span("decide") as span:
        trace_id = span.get_span_context().trace_id
        await publisher.publish(subjects.command_subject(SENDER, "volume", "ns", "v"), b"{}", msg_id="t1")
    # Published outside any span: no trace header, and the handler sees no trace.
    await publisher.publish(subjects.command_subject(SENDER, "volume", "ns", "w"), b"{}", msg_id="t2")
    await publisher.flush()

    consumer = Consumer(bus, ConsumerSpec(stream=COMMANDS, durable="traced"), handle)
    consumer.start()
    await eventually(lambda: len(seen) == 2, what="both handled")
    await consumer.stop()
    await publisher.close()

    assert seen[0][0] == trace_id
    assert seen[0][1] == trace_id
    assert seen[0][2].startswith(f"00-{trace_id:032x}-")
    assert seen[1][2] == ""
    assert seen[1][0] != trace_id
