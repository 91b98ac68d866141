"""SIM-V2 snapshots: a Snapshot CR a client creates (the v2 upgrade's snapshot-before-upgrade, label
`longhorn.io/for-data-engine-live-upgrade=<node upgrade>`) is taken by the volume's engine and its
checksum computed; after `snapshot_seconds` it is `readyToUse` with a checksum (V2U-21).

Only a snapshot of a volume whose engine runs is taken (Longhorn snapshots through the engine); one
of a volume that does not exist gets `status.error` and is never ready. The checksum is derived from
the volume and the snapshot's name, so a replayed run writes the same bytes.
"""

from __future__ import annotations

import hashlib

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.objects import engine_name
from corral_sandbox.simulator.scope import running
from corral_sandbox.simulator.view import Obj, deleting, spec, status


def reconcile_snapshots(ctx: ReconcileContext) -> None:
    for snapshot in ctx.view.all("snapshot"):
        with ctx.isolated("snapshot", snapshot):
            _reconcile_snapshot(ctx, snapshot)


def _reconcile_snapshot(ctx: ReconcileContext, snapshot: Obj) -> None:
    if deleting(snapshot) or status(snapshot).get("readyToUse"):
        return
    name = snapshot["metadata"]["name"]
    volume_name = str(spec(snapshot).get("volume", ""))
    volume = ctx.view.get("volume", volume_name)
    if volume is None:
        ctx.patch_status(
            "snapshot",
            snapshot,
            {"readyToUse": False, "error": f"volume {volume_name!r} not found"},
            "no volume",
        )
        return
    engine = ctx.view.get("engine", engine_name(volume_name))
    if engine is None or not running(engine):
        return  # taken once the engine runs again
    if not ctx.waited(f"snapshot/{name}", ctx.config.snapshot_seconds):
        return
    checksum = hashlib.sha512(f"{volume_name}/{name}".encode()).hexdigest()
    labels = dict(spec(snapshot).get("labels") or {})
    ctx.patch_status(
        "snapshot",
        snapshot,
        {
            "readyToUse": True,
            "checksum": checksum,
            "creationTime": ctx.stamp,
            "userCreated": True,
            "markRemoved": False,
            "labels": labels,
            "size": str(spec(volume).get("size", "0")),
            "ownerID": status(volume).get("ownerID", ""),
            "error": "",
        },
        "snapshot taken and checksummed",
    )
