"""What `corral plan v2-upgrade` (and `explain`) says about a manager beyond its next command:
which nodes it would upgrade, in which order, and which volumes block which node.

The order is the one the manager follows (the node in flight, then pending nodes by name); the
blockers are exactly what the node's `initializing` step would wait for.
"""

from __future__ import annotations

from corral_decision.decider import Explanation
from corral_model import longhorn as lh
from corral_v2_upgrade.manager import node_set
from corral_v2_upgrade.node import readiness_blockers
from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.view import DEFAULT_IM_IMAGE, UpgradeView

S = UpgradeState


def node_plan(view: UpgradeView, manager: lh.DataEngineUpgradeManager) -> list[Explanation]:
    """One explanation per node the manager covers (kind `Node`, grouped by the manager's name):
    reason `upgrading`, `queued` (detail: its place, and its blockers), `completed` or `error`."""
    status = manager.status
    nodes = status.upgrade_nodes
    if not nodes:
        image = status.instance_manager_image or view.setting(DEFAULT_IM_IMAGE) or ""
        nodes = node_set(view, manager, image)
    order = [status.upgrading_node] if status.upgrading_node else []
    order += [n for n in sorted(nodes) if nodes[n].state == S.PENDING and n not in order]
    out = []
    for node in sorted(nodes, key=lambda n: (order.index(n) if n in order else len(order), n)):
        entry = nodes[node]
        if node in order:
            place = order.index(node) + 1
            blockers = readiness_blockers(view, node)
            detail = f"#{place} of {len(order)}" + (f"; blocked: {'; '.join(blockers)}" if blockers else "")
            reason = "upgrading" if node == status.upgrading_node else "queued"
        else:
            reason, detail = str(entry.state), entry.message
        out.append(
            Explanation(
                kind="Node",
                namespace=manager.metadata.namespace,
                name=node,
                reason=reason,
                group=manager.metadata.name,
                detail=detail,
            )
        )
    return out
