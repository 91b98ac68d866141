"""Spans go to an OTLP/HTTP collector only when one is configured."""

from __future__ import annotations

import asyncio

from aiohttp import web

from corral_runtime.tracing import configure_tracing, exporting, traces_endpoint


def test_exporting_follows_the_standard_variables() -> None:
    assert not exporting({})
    assert not exporting({"OTEL_EXPORTER_OTLP_ENDPOINT": ""})
    assert exporting({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert exporting({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})


async def test_spans_reach_an_otlp_http_collector() -> None:
    received: list[tuple[str, bytes]] = []

    async def collect(request: web.Request) -> web.Response:
        received.append((request.path, await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    endpoint = f"http://127.0.0.1:{port}"
    try:
        provider = configure_tracing(
            "engine-upgrade", "pod-a", {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, install=False
        )
        assert provider is not None
        with provider.get_tracer("test").start_as_current_span("decide volume pvc-1"):
            pass
        # The exporter posts from its own thread with a blocking client; keep the loop free to answer.
        assert await asyncio.to_thread(provider.force_flush, 10_000)
        provider.shutdown()
    finally:
        await runner.cleanup()
    [(path, body)] = received
    assert path == "/v1/traces"
    assert b"decide volume pvc-1" in body
    assert b"corral-engine-upgrade" in body


def test_the_traces_endpoint_is_resolved_from_the_given_environment() -> None:
    assert traces_endpoint({}) is None
    assert traces_endpoint({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}) == "http://c:4318/v1/traces"
    assert (
        traces_endpoint(
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t/x",
            }
        )
        == "http://t/x"
    )


def test_without_a_collector_there_is_no_provider() -> None:
    """Nothing records: a service gets no tracer, and its hot paths skip tracing altogether."""
    assert configure_tracing("watcher", environ={}, install=False) is None
