"""Longhorn's status conditions as its controllers serialize them (`types.Condition` in
longhorn-manager, no `omitempty`): always the six keys, `lastProbeTime` the empty string (Longhorn
never probes), `lastTransitionTime` kept while the status stays the same.

Every condition the simulator writes on a Longhorn object goes through `condition`, so a decoder
reading the sandbox meets what it meets on a real cluster rather than a tidy three-key subset.
"""

from __future__ import annotations

from typing import Any


def condition(
    previous: list[Any] | None,
    kind: str,
    status: str,
    *,
    reason: str = "",
    message: str = "",
    stamp: str = "",
) -> dict[str, str]:
    """The `kind` condition; its transition time stays the one in `previous` if the status did not change."""
    for held in previous or ():
        if isinstance(held, dict) and held.get("type") == kind and held.get("status") == status:
            stamp = str(held.get("lastTransitionTime") or stamp)
    return {
        "lastProbeTime": "",
        "lastTransitionTime": stamp,
        "message": message,
        "reason": reason,
        "status": status,
        "type": kind,
    }
