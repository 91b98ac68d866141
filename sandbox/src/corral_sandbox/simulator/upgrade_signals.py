"""SIM-V2: the node controller's `DataEngineUpgradeRequested` condition and what reads it
(longhorn-behaviour.md §5.4).

The condition is **True** (reason `NodeDataEngineUpgradeRequested`) while a NodeDataEngineUpgrade
for the node exists in a state outside {rebuilding-replica, finalizing, error, completed} — "" and
`initializing` included — and **False** otherwise. While it is True the node is `Schedulable=False`
with the same reason (unless it is already unschedulable for being cordoned). The other effects read
the *condition*, as Longhorn's controllers do, never the CRs: `upgrading_nodes()` is what the replica
scheduler (v2 replicas skip these nodes — the intent, not the prototype's inverted filter), the volume
controller (no replenishment for v2 volumes owned there), the engine's rebuilds and the instance
handler (a v2 engine there survives its IM going away) ask.

A cluster that never ran a v2 upgrade gets no condition at all (Longhorn v1.10's nodes have none), so
the shapes of every other scenario stay as they were; once a node has the condition it is kept.
"""

from __future__ import annotations

from corral_sandbox.simulator.conditions import condition
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.view import ClusterView, Obj, spec, status

REQUESTED = "DataEngineUpgradeRequested"
REASON = "NodeDataEngineUpgradeRequested"
NODE_LABEL = "longhorn.io/node"
# the node upgrade's states in which its node no longer counts as upgrading
_RELEASED = ("rebuilding-replica", "finalizing", "error", "completed")


def upgrade_for(view: ClusterView, node: str) -> str:
    """The NodeDataEngineUpgrade holding `node` in upgrade ("" when none does)."""
    for upgrade in view.all("nodedataengineupgrade"):
        labels = upgrade.get("metadata", {}).get("labels") or {}
        target = spec(upgrade).get("nodeID") or labels.get(NODE_LABEL, "")
        if target == node and status(upgrade).get("state", "") not in _RELEASED:
            return str(upgrade["metadata"]["name"])
    return ""


def condition_status(node: Obj, kind: str) -> str:
    for held in status(node).get("conditions", []) or []:
        if isinstance(held, dict) and held.get("type") == kind:
            return str(held.get("status", ""))
    return ""


def upgrading_nodes(view: ClusterView) -> set[str]:
    """Nodes whose `DataEngineUpgradeRequested` condition is True."""
    return {n["metadata"]["name"] for n in view.all("node") if condition_status(n, REQUESTED) == "True"}


def reconcile_node_upgrade_signals(ctx: ReconcileContext) -> None:
    has_upgrades = bool(ctx.view.objects["nodedataengineupgrade"])
    for node in ctx.view.all("node"):
        with ctx.isolated("node", node):
            if has_upgrades or condition_status(node, REQUESTED):
                _sync(ctx, node)


def _sync(ctx: ReconcileContext, node: Obj) -> None:
    name = node["metadata"]["name"]
    held = status(node).get("conditions", []) or []
    upgrade = upgrade_for(ctx.view, name)
    if upgrade:
        requested = condition(
            held,
            REQUESTED,
            "True",
            reason=REASON,
            message=f"nodeDataeEngineUpgrade {upgrade} is in progress",
            stamp=ctx.stamp,
        )
    else:
        requested = condition(held, REQUESTED, "False", stamp=ctx.stamp)
    schedulable = next((c for c in held if isinstance(c, dict) and c.get("type") == "Schedulable"), None)
    if upgrade and (schedulable is None or schedulable.get("status") != "False"):
        schedulable = condition(
            held,
            "Schedulable",
            "False",
            reason=REASON,
            message=f"Data engine of node {name} is being upgraded",
            stamp=ctx.stamp,
        )
    elif not upgrade and schedulable is not None and schedulable.get("reason") == REASON:
        flag = "False" if spec(node).get("allowScheduling", True) is False else "True"
        schedulable = condition(held, "Schedulable", flag, stamp=ctx.stamp)
    others = [c for c in held if isinstance(c, dict) and c.get("type") not in (REQUESTED, "Schedulable")]
    wanted = [*others, *([schedulable] if schedulable is not None else []), requested]
    if wanted != held:
        ctx.patch_status("node", node, {"conditions": wanted}, f"node {REQUESTED}={requested['status']}")
