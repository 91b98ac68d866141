"""One restart for a burst of settings changes, not one per change.

Danger-zone settings are often written one after another (five in a few seconds from a script or
a Helm upgrade). Judged on each change, an idle instance manager loses its pod for the first, its
replacement lags the second, and so on: five restarts where Longhorn's resync would usually have
made one. So a restart caused by a settings change on a target that was already free to restart
waits a short `settle` since the latest change; every further change moves that deadline.

A restart that became possible only after the change (an instance manager turning idle, the last
volume detaching) is never held: nothing further is gained by waiting, and the operator who
detached to apply the settings is waiting for it. im-restart and setting-sync both use this.
"""

from __future__ import annotations


def settle_until(
    changed_at: float | None, free_since: float | None, settle: float, now: float
) -> float | None:
    """When a settings restart may go, if it must still wait; None when it may go now.

    `changed_at`: the latest danger-zone settings change seen (None: none since start-up);
    `free_since`: since when the target has been free to restart (an instance manager running and
    idle, every volume detached; None: unknown, taken as before the change)."""
    if settle <= 0 or changed_at is None:
        return None
    until = changed_at + settle
    if now >= until:
        return None
    if free_since is not None and free_since > changed_at:
        return None  # it became free after the change (a detach): never delayed
    return until
