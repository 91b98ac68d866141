"""One volume's engine upgrade is one trace: watcher → engine-upgrade → actuator, parent to child.

The stack runs in this event loop (sandbox cluster, the in-memory NATS server, the three services
under the runtime harness), each service with a tracer provider of its own (its own `service.name`)
exporting to one in-memory exporter, so the spans of all three can be followed by their parent ids
as a collector would join them from three processes.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from corral_runtime.tracing import service_resource
from tests.fixtures.fakebus import FakeNatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox
from tests.scenarios.engine_upgrade.conftest import Running, actuator, engine_upgrade, watcher
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING

pytestmark = pytest.mark.scenario

VOLUME = "vol-traced"


@pytest.fixture
def exported() -> InMemorySpanExporter:
    return InMemorySpanExporter()


def provider_for(service: str, exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=service_resource(service, f"{service}-1"))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def logs(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    """What the services log: each sets its logs up on the stderr of the moment it starts."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    return stream


@pytest.fixture
async def traced_stack(
    sandbox: Sandbox, fake_nats: FakeNatsServer, exported: InMemorySpanExporter, logs: io.StringIO
) -> AsyncIterator[list[Running]]:
    # The in-memory server is the session's: start from empty streams whatever ran before on this
    # worker (a stream left with another configuration would stop the services at their check).
    fake_nats.reset()
    kubeconfig, url = str(sandbox.cluster.kubeconfig_path), fake_nats.url
    services = [
        watcher(kubeconfig, url, provider_for("watcher", exported)),
        actuator(kubeconfig, url, provider_for("actuator", exported), log_level="info", audit_log=True),
        # a patch refused by a race with the simulator is retried in a second, not after the
        # deployed 120 s backoff: the trace of the patch that lands is what this test reads
        engine_upgrade(url, tracer_provider=provider_for("engine-upgrade", exported), retry_backoff_s=1.0),
    ]
    try:
        await eventually(lambda: all(s.ready for s in services), within=60, what="the stack to lead")
        yield services
    finally:
        for service in reversed(services):
            await service.stop()


def _attribute(span: ReadableSpan, name: str) -> Any:
    return (span.attributes or {}).get(name)


def _service(span: ReadableSpan) -> Any:
    return span.resource.attributes.get("service.name")


def _parent_of(span: ReadableSpan, spans: Sequence[ReadableSpan]) -> ReadableSpan:
    assert span.parent is not None, f"{span.name} has no parent"
    [parent] = [s for s in spans if s.context is not None and s.context.span_id == span.parent.span_id]
    assert parent.context is not None and parent.context.trace_id == span.context.trace_id
    return parent


def _upgraded(spans: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    """The actuator's command spans for the volume's spec.image, applied."""
    return [
        s
        for s in spans
        if _service(s) == "corral-actuator"
        and _attribute(s, "corral.target") == f"Volume/longhorn-system/{VOLUME}"
        and _attribute(s, "corral.outcome") == "applied"
    ]


async def test_one_volumes_upgrade_is_one_trace_across_the_three_services(
    sandbox: Sandbox, traced_stack: list[Running], exported: InMemorySpanExporter, logs: io.StringIO
) -> None:
    await sandbox.deploy_engine_image(UPGRADE_IMAGE, within=20)
    await sandbox.create_volume(VOLUME, replicas=2, image=UPGRADE_IMAGE, node="node-1")
    await sandbox.wait_volume(
        VOLUME, lambda v: v.get("status", {}).get("robustness") == "healthy", within=20, what="healthy"
    )
    await sandbox.set_setting(LIMIT_SETTING, "1")  # automatic engine upgrade on: the volume moves

    await eventually(lambda: bool(_upgraded(exported.get_finished_spans())), within=30, what="the patch")
    spans = exported.get_finished_spans()
    [actuated] = _upgraded(spans)

    decided = _parent_of(actuated, spans)
    assert _service(decided) == "corral-engine-upgrade"
    assert decided.name == "decide Volume"
    assert _attribute(decided, "corral.target") == f"Volume/longhorn-system/{VOLUME}"
    assert _attribute(decided, "corral.command.id") == _attribute(actuated, "corral.command.id")
    assert _attribute(decided, "corral.changes") == (f'/spec/image = "{DEFAULT_IMAGE}"',)
    assert f'/spec/image = "{UPGRADE_IMAGE}"' in _attribute(decided, "corral.preconditions")
    assert _attribute(decided, "corral.reason")

    watched = _parent_of(decided, spans)
    assert _service(watched) == "corral-watcher"
    assert watched.kind is SpanKind.PRODUCER
    assert watched.name.startswith("publish lh.obj.")
    assert watched.parent is None, "the watcher's span starts the trace"

    children = {
        s.name: s for s in spans if s.parent is not None and s.parent.span_id == actuated.context.span_id
    }
    assert _attribute(children["policy check"], "corral.policy.allowed") is True
    assert _attribute(children["PATCH volumes"], "http.response.status_code") == 200
    assert "publish lh.res" in children

    # The actuator's log line about the command carries its span's ids.
    [logged] = [
        line
        for line in map(_json_or_none, logs.getvalue().splitlines())
        if line is not None
        and line.get("event") == "command finished"
        and line.get("command_id") == _attribute(actuated, "corral.command.id")
    ]
    assert (logged["service"], logged["sender"]) == ("actuator", "engine-upgrade")  # who logs, who asked
    assert logged["trace_id"] == format(actuated.context.trace_id, "032x")
    assert logged["span_id"] == format(actuated.context.span_id, "016x")


def _json_or_none(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
