"""Why an instance manager's pod is (not) deleted: the `reason` of `explain()` and of a command.

One vocabulary for the operator (`corral plan im-restart --explain`), the commands counter's `mode`
label and the tests, so a reason is spelled once.
"""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    # --- a delete is due ---------------------------------------------------------------------------
    POD_FAILED = "pod-failed"
    """The pod is in a terminal or unknown phase: the IM is in `error` (§4.3 step 7, always deleted)."""
    SETTINGS_UNSYNCED = "settings-unsynced"
    """Running, idle, and the pod lags the danger-zone settings (or the v2 CPU mask / hugepages)."""

    # --- left alone --------------------------------------------------------------------------------
    SETTINGS_SYNCED = "settings-synced"
    BUSY = "busy"
    """An engine, engine-frontend or replica instance is `running` or `starting` in it."""
    HUGEPAGE_CAPACITY = "hugepage-capacity"
    """The hugepage settings differ and the node could not take a new pod (§4.3 step 6)."""
    NOT_RUNNING = "not-running"
    """`starting`, `unknown` (node down), or the IM's status and its pod do not agree yet."""
    POD_MISSING = "pod-missing"
    """No pod to delete: creating one is Longhorn's IM controller's job."""
    POD_TERMINATING = "pod-terminating"
    SETTINGS_INVALID = "settings-invalid"
    """A stored danger-zone setting does not parse: Longhorn's sync fails, nothing is decided."""
    CHECK_FAILED = "check-failed"
    """A predicate could not be evaluated (e.g. the Longhorn node is not in the view)."""
    SETTLING = "settling"
    """A delete is due, but the settings changed moments ago while it was idle: one restart for a
    burst of changes (`settle`), not one per change."""
    CONCURRENCY_LIMIT = "concurrency-limit"
    """A delete is due but `max_concurrent_im_restarts[_per_node]` restarts are in flight."""
    COMMAND_PENDING = "command-pending"
    """A delete was sent and the view does not show it yet."""
    RESTARTING = "restarting"
    """Its pod was deleted by us; the replacement is not running yet."""
    RETRY_BACKOFF = "retry-backoff"
    """The actuator refused the last delete; waiting for a fresher view (or the backoff)."""
    VIEW_INCOMPLETE = "view-incomplete"
    """Not every kind has been listed yet: nothing is decided."""
