"""The watcher as a service: the harness's context in, list/watch loops out to LH_OBJECTS.

The watcher needs no leader lease: two replicas publish the same event ids and JetStream stores
each once. It is ready once every kind has been listed and published, so a rolling update does not
take the old replica away before the new one has caught up. Like the actuator, it runs the
upgrade-path gate on a live read of the API server (`corral_upgradepath.hooks.live_gate`), because every
other service's view of the cluster depends on what the watcher publishes.
"""

from __future__ import annotations

import asyncio
import contextlib

from corral_kube.client import api_client
from corral_runtime import ServiceContext
from corral_watcher.config import WatcherConfig
from corral_watcher.kindwatch import WatchSettings
from corral_watcher.metrics import WatcherMetrics
from corral_watcher.watcher import Watcher, resolve_kinds


def watch_settings(config: WatcherConfig) -> WatchSettings:
    return WatchSettings(
        namespace=config.namespace,
        resync_period=config.resync_period_s,
        inactivity_timeout=config.inactivity_timeout_s,
        watch_timeout=config.watch_timeout_s,
        page_size=config.page_size,
        tombstone_ttl=config.tombstone_ttl_s,
    )


async def main(ctx: ServiceContext[WatcherConfig]) -> None:
    config = ctx.config
    resolve_kinds(config.kinds)
    ctx.readiness.require("synced")  # declared by __main__ too (ready_when); here for other callers
    # The harness has created the contract's streams (corral_bus.ensure_streams) before main runs.
    api = await api_client(config.kubeconfig or None)
    watcher = Watcher(
        api,
        ctx.bus,
        config.kinds,
        watch_settings(config),
        metrics=WatcherMetrics(ctx.metrics),
        publish_window=config.publish_window,
        ack_timeout=config.ack_timeout_s,
        tracer=ctx.tracer,
    )
    try:
        await watcher.start()
        ctx.log.info("watching", kinds=list(watcher.kinds), namespace=config.namespace)
        synced = asyncio.ensure_future(watcher.wait_synced())

        def mark_synced(done: asyncio.Future[None]) -> None:
            if not done.cancelled():
                ctx.readiness.mark("synced")

        synced.add_done_callback(mark_synced)
        failed = asyncio.ensure_future(watcher.wait_failed())
        stopping = asyncio.ensure_future(ctx.stop.wait())
        try:
            await asyncio.wait({failed, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (synced, stopping):
                f.cancel()
        if failed.done():
            failed.result()
        failed.cancel()
    finally:
        with contextlib.suppress(Exception):
            await watcher.stop(flush_timeout=max(1.0, config.shutdown_grace_s / 2))
        await api.close()
