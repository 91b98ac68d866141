"""Volumes for the danger-zone scenarios, created and moved through the API server as a user (or
the CSI driver) would: attach by setting `spec.nodeID`, detach by clearing it."""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox


def state(volume: dict[str, Any]) -> str:
    return str((volume.get("status") or {}).get("state", ""))


async def attached(
    sandbox: Sandbox,
    name: str,
    node: str = "node-1",
    *,
    replicas: int = 1,
    access_mode: str = "rwo",
    migratable: bool = False,
    backing_image: str = "",
) -> dict[str, Any]:
    """`backing_image`: the volume uses it (a backing-image manager runs where its replicas are)."""
    body = lh_objects.volume(
        name,
        sandbox.namespace,
        image=DEFAULT_IMAGE,
        replicas=replicas,
        node_id=node,
        data_locality="best-effort",
    )
    body["spec"]["accessMode"] = access_mode
    body["spec"]["migratable"] = migratable
    if backing_image:
        body["spec"]["backingImage"] = backing_image
    await sandbox.create("volumes", body)
    return await sandbox.wait_volume(
        name,
        lambda v: state(v) == "attached" and (v.get("status") or {}).get("robustness") == "healthy",
        within=30,
        what=f"{name} attached and healthy",
    )


async def detach(sandbox: Sandbox, name: str) -> dict[str, Any]:
    await sandbox.patch("volumes", name, {"spec": {"nodeID": ""}})
    return await sandbox.wait_volume(
        name, lambda v: state(v) == "detached", within=30, what=f"{name} detached"
    )
