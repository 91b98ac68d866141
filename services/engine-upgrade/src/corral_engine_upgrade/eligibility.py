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
from corral_engine_upgrade.records import ImageRecord, VolumeRecord
from corral_engine_upgrade.view import ClusterView


def volume_reason(volume: VolumeRecord, view: ClusterView, now: float) -> Reason | None:
    """None when the volume may be upgraded now; otherwise why not (the first rule it fails)."""
    if volume.spec_image != volume.current_image:
        return Reason.IN_PROGRESS
    if volume.expectation is not None:
        return Reason.COMMAND_PENDING
    if volume.v2:  # deviation (§1.4): never let a v2 volume take a slot it cannot use
        return Reason.V2_VOLUME
    default_image = view.default_image
    if not default_image:
        return Reason.NO_DEFAULT_IMAGE
    if volume.spec_image == default_image:
        return Reason.ALREADY_DEFAULT
    default_ei = view.default_ei
    if default_ei is None:
        return Reason.DEFAULT_IMAGE_MISSING
    if not default_ei.usable:
        return Reason.DEFAULT_IMAGE_UNUSABLE
    current_ei = view.current_engine_image(volume)
    state = volume.state
    if state == "detached":
        # Deliberate deviation from HEAD (§1.3 checks nothing else when detached): AEU-10 / T1.3 want
        # an expanding volume left alone until its expansion is done, and an operator would not
        # want its engine swapped between the resize request and the resize.
        if volume.expansion_required:
            return Reason.EXPANDING
    else:
        if state != "attached":
            return Reason.NOT_ATTACHED_OR_DETACHED
        reason = _live_reason(volume, current_ei, default_ei)
        if reason is not None:
            return reason
    if not volume.node and not any(r.node for r in volume.replicas):
        return Reason.NO_REPLICA_NODES
    if current_ei is None or not current_ei.ready_on(volume):
        return Reason.IMAGE_NOT_READY
    if not default_ei.ready_on(volume):
        return Reason.DEFAULT_IMAGE_NOT_READY
    if volume.rv <= volume.hold_rv and now < volume.hold_until:
        return Reason.RETRY_BACKOFF
    return None


def _live_reason(
    volume: VolumeRecord, current_ei: ImageRecord | None, default_ei: ImageRecord
) -> Reason | None:
    """§1.3 live-upgradable, items 2-8, in Longhorn's order."""
    if volume.robustness != "healthy":
        return Reason.DEGRADED if volume.robustness == "degraded" else Reason.NOT_HEALTHY
    if volume.standby:
        return Reason.DR_VOLUME
    if volume.expansion_required:
        return Reason.EXPANDING
    if volume.migrating:
        return Reason.MIGRATING
    if volume.strict_local:
        return Reason.STRICT_LOCAL
    if current_ei is None:
        return Reason.CURRENT_IMAGE_MISSING
    if not current_ei.can_live_upgrade_to(default_ei):
        return Reason.INCOMPATIBLE_CONTROLLER_API
    return None
