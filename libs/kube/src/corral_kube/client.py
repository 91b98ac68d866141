"""An ApiClient from a kubeconfig, the way every corral component that talks to Kubernetes gets one.

Only the watcher (read) and the actuator (write) use it in production; the sandbox's simulator and
the tests use it too, so that everything reaches the emulator exactly as it would a real cluster.
Where the configuration comes from follows kubectl: the file given, else $KUBECONFIG, else the pod's
service account when running in a cluster, else ~/.kube/config (an operator's desk: `corral
pre-upgrade` there must not fail with "Service host/port is not set").
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from kubernetes_asyncio import client, config


class NoKubeconfig(RuntimeError):
    """Nothing says how to reach a cluster."""


def kubeconfig_source(kubeconfig: str | None = None) -> str | None:
    """The kubeconfig file to load, or None for the in-cluster service account (see the docstring)."""
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        return path.split(os.pathsep)[0]
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return None
    home = Path("~/.kube/config").expanduser()
    if home.is_file():
        return str(home)
    raise NoKubeconfig(
        "no cluster to talk to: give --kubeconfig, set KUBECONFIG, run in a pod, or have ~/.kube/config"
    )


async def api_client(kubeconfig: str | None = None, *, max_connections: int = 100) -> client.ApiClient:
    """Build a client from `kubeconfig`, else $KUBECONFIG, the in-cluster service account or
    ~/.kube/config, in that order."""
    configuration = client.Configuration()
    path = kubeconfig_source(kubeconfig)
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
