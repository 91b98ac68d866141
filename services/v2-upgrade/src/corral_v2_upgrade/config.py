"""The rules' own settings, apart from the runner's (service.V2UpgradeConfig maps CORRAL_* onto them)."""

from __future__ import annotations

import msgspec


class DeciderConfig(msgspec.Struct, frozen=True, kw_only=True):
    command_ttl: float = 60.0
    """A command with neither a result nor a visible effect after this long is presumed lost."""
    applied_ttl: float = 600.0
    """After an `applied` result, how long the view may lag before the command stops counting."""
    retry_backoff: float = 120.0
    """After a refusal with no fresher object in view, wait this long before the same command."""
    node_timeout: float = 1800.0
    """A node upgrade still unfinished this long after it was created is aborted and restored
    (reason `timeout`); 0 = never."""
    max_retries: int = 5
    """Failed attempts per node before it is marked `error` for good (the manager moves on)."""
    snapshot_before_upgrade: bool = False
    """Snapshot each attached volume of a node before its upgrade (fixed per attempt at creation)."""
    events: bool = False
    """Record Kubernetes Events on the two CRs, one per transition (announce.py)."""
