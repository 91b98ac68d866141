"""List one kind of object, decoded straight into its slim Struct, page by page.

The list is the start of every watch (its resourceVersion is where the watch resumes) and the whole
of every resync, so it must be cheap: the raw body goes through msgspec, never through
kubernetes-asyncio's models. Large collections are read in pages (`limit` + `continue`), so the API
server never has to build one huge response; if a continue token expires (410) the list restarts,
because pages from two different snapshots must not be mixed.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec
from kubernetes_asyncio.client import ApiClient

from corral_kube.decoding import KindDecoder, Rejected, decode_status
from corral_kube.errors import KubeApiError
from corral_model.kinds import KindInfo

K = TypeVar("K")

AUTH_SETTINGS = ["BearerToken"]


class Listed(msgspec.Struct, Generic[K], gc=False):
    """Every object of a kind at one resourceVersion."""

    items: list[K]
    resource_version: str
    rejected: list[Rejected] = msgspec.field(default_factory=list)
    """Objects that exist but do not decode into the slim Struct (see KindDecoder.decode_list)."""


async def get_raw(
    api: ApiClient, path: str, query: list[tuple[str, Any]], *, request_timeout: float
) -> tuple[int, bytes]:
    """GET `path` through kubernetes-asyncio's auth and TLS, returning status and raw body."""
    response = await api.call_api(
        path,
        "GET",
        query_params=query,
        header_params={"Accept": "application/json"},
        auth_settings=AUTH_SETTINGS,
        _preload_content=False,
        _request_timeout=request_timeout,
    )
    try:
        body = await response.read()
    finally:
        response.release()
    return response.status, body


async def list_objects(
    api: ApiClient,
    kind: KindInfo,
    namespace: str,
    decoder: KindDecoder[K],
    *,
    page_size: int = 500,
    request_timeout: float = 60.0,
    max_restarts: int = 3,
) -> Listed[K]:
    """All objects of `kind` in `namespace` (cluster-wide for cluster-scoped kinds) at one version.

    Raises KubeApiError on an error answer, msgspec errors on a body that is not a list of `kind`.
    """
    path = kind.path(namespace)
    restarts = 0
    while True:
        items: list[K] = []
        rejected: list[Rejected] = []
        token = ""
        while True:
            query: list[tuple[str, Any]] = []
            if page_size > 0:
                query.append(("limit", page_size))
            if token:
                query.append(("continue", token))
            status, body = await get_raw(api, path, query, request_timeout=request_timeout)
            if status == 410 and token and restarts < max_restarts:
                break  # the continue token outlived the server's history: start over
            if not 200 <= status < 300:
                error = decode_status(body)
                raise KubeApiError(status, error.reason, error.message)
            page = decoder.decode_list(body)
            items.extend(page.items)
            rejected.extend(page.rejected)
            token = page.continue_token
            if not token:
                return Listed(items=items, resource_version=page.resource_version, rejected=rejected)
        restarts += 1
