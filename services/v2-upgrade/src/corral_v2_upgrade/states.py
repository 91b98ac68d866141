"""The upgrade states of both machines (longhorn-behaviour.md §5.2), as the CRs spell them.

One enum for both, as Longhorn has one `UpgradeState` type: the manager uses `""`, `initializing`,
`upgrading` and the terminal two; a node upgrade the per-node steps; a manager's `upgradeNodes`
entries `pending` and whatever state their node upgrade reports.
"""

from __future__ import annotations

import enum


class UpgradeState(enum.StrEnum):
    UNDEFINED = ""
    PENDING = "pending"
    INITIALIZING = "initializing"
    SWITCHING_OVER = "switching-over"
    FAILING_REPLICAS = "failing-replicas"
    SWITCHED_OVER = "switched-over"
    UPGRADING = "upgrading"
    UPGRADING_INSTANCE_MANAGER = "upgrading-instance-manager"
    SWITCHING_BACK = "switching-back"
    SWITCHED_BACK = "switched-back"
    REBUILDING_REPLICA = "rebuilding-replica"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    ERROR = "error"


TERMINAL = frozenset({UpgradeState.COMPLETED, UpgradeState.ERROR})

NODE_STEPS = (
    UpgradeState.UNDEFINED,
    UpgradeState.INITIALIZING,
    UpgradeState.FAILING_REPLICAS,
    UpgradeState.SWITCHING_OVER,
    UpgradeState.UPGRADING_INSTANCE_MANAGER,
    UpgradeState.SWITCHING_BACK,
    UpgradeState.REBUILDING_REPLICA,
    UpgradeState.FINALIZING,
)
"""A node upgrade's non-terminal states, in the order it passes through them."""

MANAGER_STEPS = (UpgradeState.UNDEFINED, UpgradeState.INITIALIZING, UpgradeState.UPGRADING)


class AbortReason(enum.StrEnum):
    TIMEOUT = "timeout"
    TARGET_IMAGE_CHANGED = "target-image-changed"
    TEMPORARY_NODE_LOST = "temporary-node-lost"
    REQUESTED = "requested"
    """The operator asked for it (the manager's `corral.longhorn.io/abort` annotation)."""
    DELETED = "deleted"
    """Its NodeDataEngineUpgrade was deleted while the node's volumes were off its own instance
    manager (switching over, its IM replaced, switching back): restored before it lets the node go."""
    RELEASED = "released"
    """In `initializing`, a volume it holds was not healthy: its own flag would hold that rebuild,
    so it lets the node go (no retry used) and the manager starts it again once it is healthy."""


def is_terminal(state: str) -> bool:
    return state in TERMINAL
