"""Snapshots only of v2 volumes: the one reason any corral service creates a Snapshot.

v2-upgrade may snapshot each attached volume of a node before that node's data engine is upgraded.
The policy can say "create Snapshots" but not of which volume, and with v2-upgrade's credentials
the issue-29 probe snapshotted a v1 volume. So before creating one the actuator reads the volume
the body names (`spec.volume`) and refuses unless it exists and is a v2 volume.
"""

from __future__ import annotations

from typing import Any

from corral_actuator.api import KubeApi
from corral_kube.patching import resolve
from corral_model.kinds import KINDS

_VOLUME = KINDS["volume"]
_SNAPSHOT = KINDS["snapshot"]


async def snapshot_refusal(api: KubeApi, namespace: str, body: dict[str, Any]) -> str | None:
    """Why the Snapshot `body` may not be created, or None."""
    name = resolve(body, "/spec/volume")
    if not isinstance(name, str) or not name:
        return "a snapshot must name its volume (spec.volume)"
    volume = await api.read(_VOLUME.path(namespace, name), f"volume {name}")
    if volume is None:
        return f"snapshots only of v2 volumes: volume {name} does not exist"
    engine = resolve(volume, "/spec/dataEngine")
    if engine != "v2":
        return f"snapshots only of v2 volumes: volume {name} is {engine if isinstance(engine, str) else 'v1'}"
    return None


def is_snapshot(kind: str) -> bool:
    return kind == _SNAPSHOT.kind
