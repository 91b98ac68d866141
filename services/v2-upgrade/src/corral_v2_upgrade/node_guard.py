"""Is the upgrading node still fit for a step that acts on it?

Longhorn's node upgrade checks readiness only in `initializing`; a node lost afterwards had its
replicas failed and its instance manager deleted all the same (issue 24). Every step that writes
to the node's data plane (fails its replicas, moves its targets away or back, deletes its instance
manager) asks here first, and holds with the reason as the node upgrade's message while the node
is gone, being deleted, not Ready, or has the v2 data engine disabled. The hold ends by itself
when the node is back; the node timeout still bounds it.
"""

from __future__ import annotations

from corral_v2_upgrade.states import UpgradeState
from corral_v2_upgrade.view import UpgradeView

S = UpgradeState

NODE_ACTING_STEPS = frozenset(
    {S.INITIALIZING, S.FAILING_REPLICAS, S.SWITCHING_OVER, S.UPGRADING_INSTANCE_MANAGER, S.SWITCHING_BACK}
)
"""The steps that write to the upgrading node's data plane (or, initializing, start doing so)."""


def unfit(view: UpgradeView, node: str) -> str:
    """Why `node` must not be acted on now, in an operator's words; "" when it may."""
    found = view.nodes.get(node)
    if found is None:
        return f"node {node} is not found"
    if found.metadata.deletion_timestamp:
        return f"node {node} is being deleted"
    if not view.node_ready(node):
        return f"node {node} is not ready"
    if view.v2_disabled(node):
        return f"V2 data engine is disabled for node {node}"
    return ""
