"""What the rules need to know about the cluster, as a small read-only view.

The rules never read the cluster themselves: the sandbox answers these questions from the API
server's store, corral's webhook server from what it read through the Kubernetes API for this one
request. Only the questions a request's rules actually ask are asked (a v1 volume's update asks
none), so a caller may answer lazily.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

TERMINAL_STATES = frozenset({"completed", "error"})
"""A DataEngineUpgradeManager in one of these states no longer counts as active."""

UPGRADE_REQUESTED = "DataEngineUpgradeRequested"
"""The Longhorn node condition the node controller derives from unfinished node upgrades (§5.4)."""

DEFAULT_IM_IMAGE = "default-instance-manager-image"


class UpgradeFacts(Protocol):
    def manager_states(self) -> Iterable[tuple[str, str]]:
        """(name, status.state) of every existing DataEngineUpgradeManager."""
        ...

    def longhorn_node_count(self) -> int: ...

    def upgrade_requested(self, node: str) -> bool | None:
        """The node's `DataEngineUpgradeRequested` condition is True; None when there is no such
        Longhorn node (or it cannot be read)."""
        ...

    def default_instance_manager_image(self) -> str: ...


@dataclass(frozen=True, slots=True)
class KnownFacts:
    """The facts given up front: what tests and the webhook server (which reads them per request) use."""

    managers: Mapping[str, str] = field(default_factory=dict)
    """Manager name → status.state."""
    upgrading: Mapping[str, bool] = field(default_factory=dict)
    """Longhorn node name → its DataEngineUpgradeRequested condition is True (every node is a key)."""
    instance_manager_image: str = ""

    def manager_states(self) -> Iterable[tuple[str, str]]:
        return self.managers.items()

    def longhorn_node_count(self) -> int:
        return len(self.upgrading)

    def upgrade_requested(self, node: str) -> bool | None:
        return self.upgrading.get(node) if node else None

    def default_instance_manager_image(self) -> str:
        return self.instance_manager_image


def condition_true(node: Mapping[str, object], condition: str = UPGRADE_REQUESTED) -> bool:
    """A Longhorn node object's condition is True; `status.conditions` is a list in v1beta2 and was a
    map keyed by type in older objects: both are read."""
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if isinstance(conditions, Mapping):
        conditions = [{"type": k, **v} for k, v in conditions.items() if isinstance(v, Mapping)]
    if not isinstance(conditions, list):
        return False
    return any(
        isinstance(c, Mapping) and c.get("type") == condition and c.get("status") == "True"
        for c in conditions
    )
