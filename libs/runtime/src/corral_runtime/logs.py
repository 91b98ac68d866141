"""Structured JSON logs, one object per line, joined to traces by `trace_id` and `span_id`.

A decision is easiest to follow when its log lines and its trace spans can be found from each other,
so every line written inside an OpenTelemetry span carries that span's ids. Logs of the libraries
underneath (nats-py, aiohttp) go through the standard `logging` module; they are rendered by the same
processors, so the whole stream stays machine-readable JSON.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog
from opentelemetry import trace
from structlog.typing import EventDict, FilteringBoundLogger, Processor, WrappedLogger

Logger = FilteringBoundLogger

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}


def add_trace_context(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
    """Add the current span's ids in the W3C hex form that trace back-ends search by."""
    context = trace.get_current_span().get_span_context()
    if context.is_valid:
        event["trace_id"] = format(context.trace_id, "032x")
        event["span_id"] = format(context.span_id, "016x")
    return event


def _with_service(service: str) -> Processor:
    def add_service(_logger: WrappedLogger, _method: str, event: EventDict) -> EventDict:
        event.setdefault("service", service)
        return event

    return add_service


def configure_logging(service: str, level: str = "info", stream: TextIO | None = None) -> Logger:
    """Route structlog and stdlib logging to JSON lines on `stream` (stderr by default)."""
    out = sys.stderr if stream is None else stream
    threshold = _LEVELS[level.lower()]
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
        _with_service(service),
        add_trace_context,
        structlog.processors.StackInfoRenderer(),
        structlog.processors.format_exc_info,
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.JSONRenderer()],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    return get_logger()


def get_logger(**bound: Any) -> Logger:
    """A logger with `bound` key/values on every line it writes."""
    logger: Logger = structlog.get_logger(**bound)
    return logger
