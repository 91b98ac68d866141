"""The webhook server's life: configuration, logs, the Kubernetes client, the HTTPS listener and the
health server (`/livez`, `/readyz`, `/metrics` on the usual health port), until SIGTERM.

Ready once a first read of Longhorn's nodes has succeeded: until then kube-apiserver's calls would
only meet 500s, so the Service sends it none.
"""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client

from corral_kube.client import api_client
from corral_runtime import HealthServer, Logger, Readiness
from corral_runtime.metrics import new_registry
from corral_runtime.shutdown import StopSignals
from corral_v2_admission.cluster import ClusterReader
from corral_v2_admission.config import AdmissionConfig
from corral_v2_admission.reservations import ManagerCreates
from corral_v2_admission.server import AdmissionServer
from corral_v2_admission.tls import CertificateFiles, tls_context

RETRY_S = 2.0


async def serve(config: AdmissionConfig, log: Logger, stop: asyncio.Event) -> None:
    readiness = Readiness("cluster")
    registry = new_registry()
    health = HealthServer(readiness, registry, config.health_host, config.health_port)
    api = await api_client(config.kubeconfig or None)
    reader = ClusterReader(api, config.namespace, config.read_timeout_s)
    server = AdmissionServer(reader, ManagerCreates(config.reservation_ttl_s), log, registry)
    tls = tls_context(config.tls_cert_file, config.tls_key_file) if config.tls_cert_file else None
    reloads: asyncio.Task[None] | None = None
    if tls is not None:
        files = CertificateFiles(tls, config.tls_cert_file, config.tls_key_file, log)
        reloads = asyncio.create_task(files.watch(stop, config.tls_reload_interval_s))
    try:
        await health.start()
        await server.start(config.webhook_host, config.webhook_port, tls)
        log.info("serving", port=server.port, tls=tls is not None, health_port=health.port)
        while not stop.is_set():
            try:
                await reader.nodes()
            except (TimeoutError, client.ApiException, OSError) as error:
                log.warning("cannot read Longhorn's nodes yet", error=repr(error))
                await _wait(stop, RETRY_S)
                continue
            readiness.mark("cluster")
            break
        await stop.wait()
    finally:
        if reloads is not None:
            reloads.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reloads
        await server.stop()
        await health.stop()
        await api.close()


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


def run(config: AdmissionConfig, log: Logger) -> int:
    async def main() -> None:
        stop = asyncio.Event()
        with StopSignals(stop, stop.set):
            await serve(config, log, stop)

    asyncio.run(main())
    return 0
