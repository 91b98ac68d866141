"""JSON log lines, and the trace ids that join them to spans."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from opentelemetry.sdk.trace import TracerProvider

from corral_runtime.logs import configure_logging, get_logger


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield out
    structlog.reset_defaults()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_lines_are_json_with_service_level_and_time(stream: io.StringIO) -> None:
    log = configure_logging("engine-upgrade", "info", stream)
    log.info("volume upgraded", volume="pvc-1", node="node-a")
    log.debug("not shown at info")
    [line] = lines(stream)
    assert line["event"] == "volume upgraded"
    assert line["service"] == "engine-upgrade"
    assert line["level"] == "info"
    assert line["volume"] == "pvc-1"
    assert line["ts"].endswith("Z")
    assert "trace_id" not in line


def test_lines_inside_a_span_carry_its_ids(stream: io.StringIO) -> None:
    configure_logging("actuator", "debug", stream)
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("apply command") as span:
        get_logger(command="c-1").debug("applying")
        logging.getLogger("nats.aio.client").warning("stdlib line %s", "too")
        context = span.get_span_context()
    get_logger().info("after the span")
    inside_structlog, inside_stdlib, outside = lines(stream)
    for line in (inside_structlog, inside_stdlib):
        assert line["trace_id"] == format(context.trace_id, "032x")
        assert line["span_id"] == format(context.span_id, "016x")
        assert len(line["trace_id"]) == 32 and len(line["span_id"]) == 16
    assert inside_structlog["command"] == "c-1"
    assert inside_stdlib["event"] == "stdlib line too"
    assert inside_stdlib["logger"] == "nats.aio.client"
    assert "trace_id" not in outside


def test_exceptions_are_rendered_into_the_line(stream: io.StringIO) -> None:
    log = configure_logging("watcher", "info", stream)
    try:
        raise RuntimeError("watch expired")
    except RuntimeError:
        log.exception("watch failed")
    [line] = lines(stream)
    assert line["level"] == "error"
    assert "RuntimeError: watch expired" in line["exception"]
