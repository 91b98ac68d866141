"""The per-volume rules of automatic engine upgrade (longhorn-behaviour.md §1.3 step 4), as one
function that names the first rule a volume fails.

Order follows longhorn-manager HEAD: in progress first (it then only counts against its owner
node's limit), then (a) not already on the default image, (b) offline- or live-upgradable, the live
conditions in Longhorn's order, (c) the current image ready on every node involved, (d) the default
image ready there too.

Deliberate deviations, each marked below:
* v2 volumes are filtered here, before the per-node limit, instead of taking a slot and being
  skipped after it (§1.4 recommends this; HEAD can starve v1 volumes with it).
* A volume whose last command was refused waits for fresh state (a newer resourceVersion) or a
  retry backoff before it is a candidate again; Longhorn has no commands to be refused.
"""

from __future__ import annotations

from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.records import (
    EXPANSION_REQUIRED,
    MARKED,
    MIGRATING,
    NODE,
    STANDBY,
    STRICT_LOCAL,
    STRIDE,
    V2,
    ImageRecord,
    VolumeRecord,
)
from corral_engine_upgrade.view import UNREADABLE, ClusterView

# Members bound once: this function runs for every volume an event touches, and a module global
# is cheaper to read than an attribute of the enum class.
_IN_PROGRESS = Reason.IN_PROGRESS
_COMMAND_PENDING = Reason.COMMAND_PENDING
_V2_VOLUME = Reason.V2_VOLUME
_NO_DEFAULT_IMAGE = Reason.NO_DEFAULT_IMAGE
_ALREADY_DEFAULT = Reason.ALREADY_DEFAULT
_DEFAULT_IMAGE_MISSING = Reason.DEFAULT_IMAGE_MISSING
_DEFAULT_IMAGE_UNUSABLE = Reason.DEFAULT_IMAGE_UNUSABLE
_EXPANDING = Reason.EXPANDING
_NOT_ATTACHED_OR_DETACHED = Reason.NOT_ATTACHED_OR_DETACHED
_DEGRADED = Reason.DEGRADED
_NOT_HEALTHY = Reason.NOT_HEALTHY
_DR_VOLUME = Reason.DR_VOLUME
_MIGRATING = Reason.MIGRATING
_STRICT_LOCAL = Reason.STRICT_LOCAL
_CURRENT_IMAGE_MISSING = Reason.CURRENT_IMAGE_MISSING
_INCOMPATIBLE_CONTROLLER_API = Reason.INCOMPATIBLE_CONTROLLER_API
_NO_REPLICA_NODES = Reason.NO_REPLICA_NODES
_IMAGE_NOT_READY = Reason.IMAGE_NOT_READY
_DEFAULT_IMAGE_NOT_READY = Reason.DEFAULT_IMAGE_NOT_READY
_RETRY_BACKOFF = Reason.RETRY_BACKOFF
_UNREADABLE = Reason.UNREADABLE
_ROLLED_BACK = Reason.ROLLED_BACK
_HELD = V2 | UNREADABLE | MARKED
_LIVE_BLOCKERS = STANDBY | EXPANSION_REQUIRED | MIGRATING | STRICT_LOCAL


def volume_reason(volume: VolumeRecord, view: ClusterView, now: float) -> Reason | None:
    """None when the volume may be upgraded now; otherwise why not (the first rule it fails): its
    own state, the default image, then (b) how it can be upgraded and (c, d) where both images are
    ready, then a refusal's backoff.

    The steps are plain functions with the conditions inline: this runs for every volume an event
    changes and for every volume a freed slot walks past."""
    spec_image = volume.spec_image
    if spec_image != volume.current_image:
        return _IN_PROGRESS
    desk = volume.desk  # the decider's bookkeeping, None for nearly every volume (desk.py)
    if desk is not None and desk.expectation is not None:
        return _COMMAND_PENDING
    flags = volume.flags
    default_image = view.default_image
    if flags & _HELD:  # one test for all three
        if flags & UNREADABLE:  # its last version did not decode: the facts held are stale
            return _UNREADABLE
        if flags & V2:
            return _V2_VOLUME  # deviation (§1.4): never let a v2 volume take a slot it cannot use
        if rolled_back_from_default(volume, default_image):
            return _ROLLED_BACK
    if not default_image:
        return _NO_DEFAULT_IMAGE
    if spec_image == default_image:
        return _ALREADY_DEFAULT
    default_ei = view.default_ei
    if default_ei is None:
        return _DEFAULT_IMAGE_MISSING
    if not default_ei.usable:
        return _DEFAULT_IMAGE_UNUSABLE
    current_image = volume.current_image  # its EngineImage, by checksum name (view.image, inline)
    current_ei = view.images.get(view.image_name(current_image)) if current_image else None
    reason = _not_upgradable(volume, flags, default_ei, current_ei)
    if reason is None:
        reason = _images_not_ready(volume, default_ei, current_ei)
    if reason is not None:
        return reason
    if desk is not None and volume.rv <= desk.hold_rv and now < desk.hold_until:
        return _RETRY_BACKOFF
    return None


def rolled_back_from_default(volume: VolumeRecord, default_image: str) -> bool:
    """`volume` was rolled back off `default_image` when its upgrade to it got stuck (rollback.py):
    held there while that image is the default, so it is not upgraded again into the same stall."""
    marks = volume.marks
    return (
        marks is not None
        and bool(default_image)
        and marks.rolled_back == default_image
        and volume.spec_image != default_image
    )


def _not_upgradable(
    volume: VolumeRecord, flags: int, default_ei: ImageRecord, current_ei: ImageRecord | None
) -> Reason | None:
    """(b) Why the volume can be upgraded neither offline (detached) nor live (attached)."""
    state = volume.state
    if state == "detached":
        # Deliberate deviation from HEAD (§1.3 checks nothing else when detached): AEU-10 / T1.3 want
        # an expanding volume left alone until its expansion is done, and an operator would not
        # want its engine swapped between the resize request and the resize.
        if flags & EXPANSION_REQUIRED:
            return _EXPANDING
        return None
    if state != "attached":
        return _NOT_ATTACHED_OR_DETACHED
    # §1.3 live-upgradable, items 2-8, in Longhorn's order.
    robustness = volume.robustness
    if robustness != "healthy":
        return _DEGRADED if robustness == "degraded" else _NOT_HEALTHY
    if flags & _LIVE_BLOCKERS:  # one test for the common case, none of them set
        if flags & STANDBY:
            return _DR_VOLUME
        if flags & EXPANSION_REQUIRED:
            return _EXPANDING
        if flags & MIGRATING:
            return _MIGRATING
        if flags & STRICT_LOCAL:
            return _STRICT_LOCAL
    if current_ei is None:
        return _CURRENT_IMAGE_MISSING
    # item 8: the old engine's controller API is within the new image's supported range
    if not (
        default_ei.controller_api_min_version
        <= current_ei.controller_api_version
        <= default_ei.controller_api_version
    ):
        return _INCOMPATIBLE_CONTROLLER_API
    return None


def _images_not_ready(
    volume: VolumeRecord, default_ei: ImageRecord, current_ei: ImageRecord | None
) -> Reason | None:
    """(c, d) §1.3 "image ready on all volume replicas": the current image, then the default one,
    on the attached node and every scheduled replica's."""
    node = volume.node
    replica_nodes = volume.replicas[NODE::STRIDE]  # node numbers (records.node_id), 0: not scheduled
    if not node and not any(replica_nodes):
        return _NO_REPLICA_NODES
    # Both images in one pass over the nodes; the current image's verdict still comes first.
    if current_ei is None or not current_ei.state_ok:
        return _IMAGE_NOT_READY
    ready = current_ei.ready_nodes
    default_ready = default_ei.ready_nodes if default_ei.state_ok else None
    if node:
        if node not in ready:
            return _IMAGE_NOT_READY
        if default_ready is not None and node not in default_ready:
            default_ready = None
    # The replicas' nodes by number, against the images' ready nodes by number.
    ready_numbers = current_ei.ready_numbers
    default_numbers = default_ei.ready_numbers if default_ready is not None else None
    for number in replica_nodes:
        if number:
            if number not in ready_numbers:
                return _IMAGE_NOT_READY
            if default_numbers is not None and number not in default_numbers:
                default_numbers = None
    if default_numbers is None:
        return _DEFAULT_IMAGE_NOT_READY
    return None


def step_gate(view: ClusterView) -> Reason | None:
    """The global reasons that stop the whole step, in Longhorn's order (§1.3 steps 1-3), checked
    before any per-volume rule. Public so that every reader of the view (the decider, `corral
    progress`) holds the same volumes back for the same reason."""
    if not view.default_image:
        return Reason.NO_DEFAULT_IMAGE
    default_ei = view.default_engine_image
    if default_ei is None:
        return Reason.DEFAULT_IMAGE_MISSING
    if not default_ei.usable:
        return Reason.DEFAULT_IMAGE_UNUSABLE
    if view.limit <= 0:
        return Reason.DISABLED
    return None
