"""Why a volume was not chosen: one stable code per rule, shared by `explain`, metrics and tests.

The codes are part of the user interface (`corral plan --explain` prints them), so they are
strings that read well on a terminal and never change meaning. They are listed in the order the
rules are checked (longhorn-behaviour.md §1.3), so the first failing rule names the reason.
"""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    # --- global gates (checked before any volume: §1.3 steps 1-3) --------------------------------
    NO_DEFAULT_IMAGE = "no-default-image"  # the default-engine-image setting is missing or empty
    DEFAULT_IMAGE_MISSING = "default-image-missing"  # no EngineImage object for the default image
    DEFAULT_IMAGE_UNUSABLE = "default-image-unusable"  # incompatible CLI, or being deleted (§1.2)
    DISABLED = "disabled"  # concurrent-automatic-engine-upgrade-per-node-limit ≤ 0

    # --- per volume (§1.3 step 4) ----------------------------------------------------------------
    IN_PROGRESS = "in-progress"  # spec.image != status.currentImage: holds a slot on its owner node
    STUCK = "stuck"  # in progress past its bound (stuck.py): still holds its slot (and its way out)
    COMMAND_PENDING = "command-pending"  # we issued a command the view does not reflect yet
    UNREADABLE = "unreadable"  # the Volume does not decode (the watcher parked it in LH_DEAD)
    V2_VOLUME = "v2-volume"  # deliberate deviation: filtered before the per-node limit (§1.4)
    ROLLED_BACK = "rolled-back"  # rolled back off the default image when stuck on it (rollback.py)
    ALREADY_DEFAULT = "already-default"
    NOT_ATTACHED_OR_DETACHED = "not-attached-or-detached"  # attaching, detaching, creating, …
    DEGRADED = "degraded"
    NOT_HEALTHY = "not-healthy"  # robustness faulted or unknown (Longhorn: "not healthy")
    DR_VOLUME = "dr-volume"  # status.isStandby
    EXPANDING = "expanding"  # status.expansionRequired
    MIGRATING = "migrating"
    STRICT_LOCAL = "strict-local"
    CURRENT_IMAGE_MISSING = "current-image-missing"  # no EngineImage for status.currentImage
    INCOMPATIBLE_CONTROLLER_API = "incompatible-controller-api"
    NO_REPLICA_NODES = "no-replica-nodes"  # neither attached nor any scheduled replica
    IMAGE_NOT_READY = "image-not-ready"  # current image not ready on every replica/attached node
    DEFAULT_IMAGE_NOT_READY = "default-image-not-ready"
    RETRY_BACKOFF = "retry-backoff"  # our last command was refused; waiting for fresh state

    # --- selection (§1.3 step 5) -----------------------------------------------------------------
    NODE_LIMIT_REACHED = "node-limit-reached"
    WAVE_PAUSED = "wave-paused"  # the wave guard paused the wave (wave_guard.py): no new upgrade starts
    AWAITING_DECISION = "awaiting-decision"  # eligible, a slot is free: the next decide() takes it
