"""SIM-VOL attachment tickets: Longhorn's VolumeAttachment (`volumeattachments.longhorn.io`), one per
volume and named after it, holding a ticket per requester.

The simulated volume controller attaches from `spec.nodeID` (and a live migration from
`spec.migrationNodeID`), so here the tickets follow those fields rather than drive them: a
`csi-attacher` ticket for the node the volume is asked onto, a second one for a migratable volume's
migration target. A ticket's status is `satisfied` once the volume is attached on its node
(`status.currentNodeID`, or `currentMigrationNodeID` for the migration ticket). Longhorn's group-B
rule (§3.3: no non-migratable RWX volume with tickets) reads exactly these.
"""

from __future__ import annotations

import hashlib
from typing import Any

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.view import Obj, deleting, spec, status

CSI_ATTACHER = "csi-attacher"


def ticket_id(volume: str, node: str) -> str:
    """Longhorn's CSI ticket id: `csi-` and a digest of the volume and node."""
    return "csi-" + hashlib.sha256(f"{volume}-{node}".encode()).hexdigest()[:16]


def wanted_tickets(volume: Obj) -> dict[str, dict[str, Any]]:
    name = volume["metadata"]["name"]
    vspec = spec(volume)
    tickets: dict[str, dict[str, Any]] = {}
    for node in (vspec.get("nodeID"), vspec.get("migrationNodeID") if vspec.get("migratable") else ""):
        if node:
            tid = ticket_id(name, str(node))
            tickets[tid] = {
                "id": tid,
                "type": CSI_ATTACHER,
                "nodeID": node,
                "parameters": {"disableFrontend": "false"},
                "generation": 0,
            }
    return tickets


def _satisfied(volume: Obj, node: str) -> bool:
    vstatus = status(volume)
    if vstatus.get("state") != "attached":
        return False
    return node in (vstatus.get("currentNodeID"), vstatus.get("currentMigrationNodeID"))


def reconcile_volume_attachments(ctx: ReconcileContext) -> None:
    if not ctx.config.kube_workloads:
        return
    for volume in ctx.view.all("volume"):
        with ctx.isolated("volume", volume):
            _attachment(ctx, volume)
    for va in ctx.view.all("volumeattachment"):
        if ctx.view.get("volume", va["metadata"]["name"]) is None and not deleting(va):
            ctx.delete("volumeattachment", va, "its volume is gone")


def _attachment(ctx: ReconcileContext, volume: Obj) -> None:
    name = volume["metadata"]["name"]
    va = ctx.view.get("volumeattachment", name)
    tickets = wanted_tickets(volume)
    if va is None:
        if not deleting(volume):
            body = {
                "apiVersion": "longhorn.io/v1beta2",
                "kind": "VolumeAttachment",
                "metadata": {"name": name, "namespace": ctx.namespace, "labels": {"longhornvolume": name}},
                "spec": {"volume": name, "attachmentTickets": tickets},
            }
            ctx.create("volumeattachment", body, "volume attachment for a volume")
        return
    # a map in `wanted` stands for the whole field: tickets that went are dropped (writes.merge_diff)
    ctx.patch_spec("volumeattachment", va, {"attachmentTickets": tickets}, "tickets follow the volume")
    statuses = {
        tid: {"id": tid, "satisfied": _satisfied(volume, str(t["nodeID"])), "conditions": [], "generation": 0}
        for tid, t in tickets.items()
    }
    ctx.patch_status("volumeattachment", va, {"attachmentTicketStatuses": statuses}, "ticket status")
