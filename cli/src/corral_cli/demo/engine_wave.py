"""What a Longhorn upgrade does to start an engine-upgrade wave, through the Kubernetes API.

The new longhorn-manager creates the EngineImage of its engine, waits for it to be deployed on the
nodes, then points the `default-engine-image` setting at it; from then on every volume not on the
default image is a candidate for the automatic engine upgrade. The demo does exactly those writes,
as an API client like any other (kubernetes-asyncio against the sandbox's API server), and nothing
else: the wave itself is the engine-upgrade service's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client

from corral_kube.client import connected
from corral_model.longhorn import engine_image_name

GROUP, VERSION = "longhorn.io", "v1beta2"
DEFAULT_IMAGE_SETTING = "default-engine-image"
MERGE_PATCH = "application/merge-patch+json"
FROM_LONGHORN = "longhorn.io/update-setting-from-longhorn"
API_GRACE_S = 30.0  # beyond the deploy wait, for the few API calls around it


class DemoError(RuntimeError):
    """The cluster did not do what a Longhorn upgrade expects (an image never deployed…)."""


async def bring_engine_image(
    kubeconfig: str,
    namespace: str,
    image: str,
    *,
    deploy_timeout: float = 60.0,
    on_step: Callable[[str], None] | None = None,
) -> None:
    """Create the EngineImage of `image` (if missing), wait until it is deployed, make it the default.
    Raises DemoError if it is not deployed in `deploy_timeout`; TimeoutError if the API hangs."""
    say = on_step or (lambda _text: None)
    async with asyncio.timeout(deploy_timeout + API_GRACE_S), connected(kubeconfig) as api:
        objects = client.CustomObjectsApi(api)
        name = engine_image_name(image)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "EngineImage",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"image": image},
        }
        try:
            await objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "engineimages", body)
            say(f"created EngineImage {name} for {image}")
        except client.ApiException as error:
            if error.status != 409:
                raise
            say(f"EngineImage {name} for {image} exists already")
        deadline = time.monotonic() + deploy_timeout
        while True:
            found: dict[str, Any] = await objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "engineimages", name
            )
            status = found.get("status") or {}
            if status.get("state") == "deployed":
                break
            if time.monotonic() > deadline:
                raise DemoError(
                    f"{image} not deployed after {deploy_timeout:.0f}s (state {status.get('state')!r})"
                )
            await asyncio.sleep(0.2)
        nodes = sum(1 for ready in (status.get("nodeDeploymentMap") or {}).values() if ready)
        say(f"{image} deployed on {nodes} nodes; setting {DEFAULT_IMAGE_SETTING} to it")
        # as the upgraded longhorn-manager writes it: the setting is read-only to anyone else, so its
        # write carries the manager's annotation, taken off again afterwards (spec §3.2)
        bodies: tuple[dict[str, Any], ...] = (
            {"metadata": {"annotations": {FROM_LONGHORN: ""}}, "value": image},
            {"metadata": {"annotations": {FROM_LONGHORN: None}}},
        )
        for body in bodies:
            await objects.patch_namespaced_custom_object(
                GROUP,
                VERSION,
                namespace,
                "settings",
                DEFAULT_IMAGE_SETTING,
                body,
                _content_type=MERGE_PATCH,  # type: ignore[call-arg]
            )
