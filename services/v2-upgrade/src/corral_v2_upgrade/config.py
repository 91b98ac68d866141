"""The rules' own settings, apart from the runner's (service.V2UpgradeConfig maps CORRAL_* onto them)."""

from __future__ import annotations

import msgspec

from corral_decision.timing import Timing


class DeciderConfig(msgspec.Struct, frozen=True, kw_only=True):
    timing: Timing = Timing()
    """The kit's expectation TTLs and retry backoff."""
    node_timeout: float = 1800.0
    """A node upgrade still unfinished this long after it was created is aborted and restored
    (reason `timeout`); 0 = never."""
    max_retries: int = 5
    """Failed attempts per node before it is marked `error` for good (the manager moves on)."""
    snapshot_before_upgrade: bool = False
    """Snapshot each attached volume of a node before its upgrade (fixed per attempt at creation)."""
    events: bool = False
    """Record Kubernetes Events on the two CRs, one per transition (announce.py)."""
