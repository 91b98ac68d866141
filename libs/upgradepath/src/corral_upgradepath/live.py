"""Reading the gate's inputs from the API server, read-only: one GET and one LIST.

Used by `corral pre-upgrade` (the Helm pre-upgrade hook Job), which runs before any corral service
and therefore cannot see the cluster through the bus. Responses are read raw and decoded with
msgspec into the slim structs, as the watcher does. A missing version setting means a fresh install
and a missing EngineImage resource means no engine images (as in Longhorn); any other failure is an
error, never a guess. kubernetes-asyncio (seconds to import) is imported on first use, so that
`corral` sub-commands that never talk to the API server do not pay for it.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import msgspec

from corral_model.kinds import KINDS
from corral_model.longhorn import EngineImage, Setting
from corral_upgradepath.cluster import CURRENT_VERSION_SETTING, ClusterView

if TYPE_CHECKING:
    from kubernetes_asyncio import client

REQUEST_TIMEOUT_S = 30.0


class LiveReadError(RuntimeError):
    """The API server could not be read: the gate cannot decide (exit 2, not 'blocked')."""


class _EngineImageList(msgspec.Struct, frozen=True):
    items: tuple[EngineImage, ...] = ()


async def _get(call: str, request: Awaitable[Any]) -> tuple[int, bytes]:
    import aiohttp

    try:
        response = await request
        body: bytes = await response.read()
        return int(response.status), body
    except (TimeoutError, aiohttp.ClientError) as e:
        raise LiveReadError(f"{call}: {type(e).__name__}: {e}") from e


def _failure(call: str, status: int, body: bytes) -> LiveReadError:
    detail = body[:300].decode("utf-8", "replace").strip()
    return LiveReadError(f"{call}: HTTP {status}: {detail}")


async def read_cluster_view(api: client.ApiClient, namespace: str) -> ClusterView:
    from kubernetes_asyncio.client import CustomObjectsApi

    custom = CustomObjectsApi(api)
    setting, engine_image = KINDS["setting"], KINDS["engineimage"]

    call = f"GET {setting.path(namespace, CURRENT_VERSION_SETTING)}"
    status, body = await _get(
        call,
        custom.get_namespaced_custom_object(
            setting.group, setting.version, namespace, setting.plural, CURRENT_VERSION_SETTING,
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S,
        ),
    )  # fmt: skip
    version_setting: Setting | None = None
    if status == 200:
        try:
            version_setting = msgspec.json.decode(body, type=Setting)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise LiveReadError(f"{call}: undecodable Setting: {e}") from e
    elif status != 404:
        raise _failure(call, status, body)

    call = f"LIST {engine_image.path(namespace)}"
    status, body = await _get(
        call,
        custom.list_namespaced_custom_object(
            engine_image.group, engine_image.version, namespace, engine_image.plural,
            _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S,
        ),
    )  # fmt: skip
    engine_images: tuple[EngineImage, ...] = ()
    if status == 200:
        try:
            engine_images = msgspec.json.decode(body, type=_EngineImageList).items
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise LiveReadError(f"{call}: undecodable EngineImage list: {e}") from e
    elif status != 404:
        raise _failure(call, status, body)
    return ClusterView(version_setting=version_setting, engine_images=engine_images)
