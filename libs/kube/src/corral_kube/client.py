"""An ApiClient from a kubeconfig, the way every corral component that talks to Kubernetes gets one.

Only the watcher (read) and the actuator (write) use it in production; the sandbox's simulator and
the tests use it too, so that everything reaches the emulator exactly as it would a real cluster.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from kubernetes_asyncio import client, config


async def api_client(kubeconfig: str | None = None, *, max_connections: int = 100) -> client.ApiClient:
    """Build a client from `kubeconfig` (default $KUBECONFIG, then in-cluster service account)."""
    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        await config.load_kube_config(config_file=path, client_configuration=configuration)
    else:
        config.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = max_connections
    return client.ApiClient(configuration)


@asynccontextmanager
async def connected(kubeconfig: str | None = None) -> AsyncIterator[client.ApiClient]:
    api = await api_client(kubeconfig)
    try:
        yield api
    finally:
        await api.close()
