"""The v2 live-upgrade rules on Longhorn volumes (longhorn-behaviour.md §5.3): no attach to a node
being upgraded, and `spec.targetNodeIDForLiveUpgrade`/`spec.image` only as a switch-over sets them.

For a v2 volume's update the node looked at is the volume's owner (`status.ownerID`), as in Longhorn,
and an owner that cannot be read is an internal error. Two deliberate differences, both so the rules
stay what the LEP means and never stand in the way of unrelated writes:
* the owner is read only when the update changes one of the fields the rules judge (`spec.nodeID`,
  the target, `spec.image`): Longhorn reads it for every v2 volume update, so a label or finalizer
  change on a volume that has no owner yet was refused as well;
* an attach is refused when the node the volume is attached **to** is being upgraded, as on create,
  as well as when its owner is (Longhorn looked only at the owner, so attaching a detached volume
  owned elsewhere to the upgrading node passed);
* a detach that changes nothing else the rules judge needs no owner: every branch allows it, and
  Longhorn's answering 500 for a volume without one (still attaching, its owner not yet set) kept
  it attached, so a 1-replica v2 volume could never leave and blocked the node's upgrade in
  `initializing` (the explorer's v2-upgrade/*/instance-starting cells).
"""

from __future__ import annotations

from corral_v2admission.denial import Denial, internal_error, invalid
from corral_v2admission.facts import UpgradeFacts
from corral_v2admission.objects import Obj, name, section, spec_str, status_str

TARGET = "targetNodeIDForLiveUpgrade"
TARGET_FIELD = f"spec.{TARGET}"
DURING = "during v2 data engine upgrade"
NOT_REQUESTED = "when the node has not requested v2 data engine upgrade"


def is_v2(obj: Obj | None) -> bool:
    return spec_str(obj, "dataEngine") == "v2"


def attach_refused(volume: str, node: str) -> Denial:
    return invalid(f"volume {volume} is not allowed to attach to node {node} {DURING}", "spec.nodeID")


def volume_create(new: Obj, facts: UpgradeFacts) -> Denial | None:
    node = spec_str(new, "nodeID")
    if is_v2(new) and node and facts.upgrade_requested(node):
        return attach_refused(name(new), node)
    if spec_str(new, TARGET):
        return invalid("spec.targetNodeIDForLiveUpgrade should be empty for a new volume", TARGET_FIELD)
    return None


def volume_update(old: Obj, new: Obj, facts: UpgradeFacts) -> Denial | None:
    if not is_v2(new):
        if spec_str(new, TARGET):
            return invalid(
                "unable to set targetNodeIDForLiveUpgrade for volume when the volume is not using "
                "data engine v2",
                TARGET_FIELD,
            )
        return None
    judged = ("nodeID", TARGET, "image")
    if all(spec_str(old, key) == spec_str(new, key) for key in judged):
        return None
    if _only_detaching(old, new):
        return None
    volume = name(new)
    owner = status_str(new, "ownerID") or status_str(old, "ownerID")
    requested = facts.upgrade_requested(owner) if owner else None
    if requested is None:
        return internal_error(f'failed to get node "{owner}" (the owner of volume {volume})')
    old_node, new_node = spec_str(old, "nodeID"), spec_str(new, "nodeID")
    attaching = not old_node and bool(new_node)
    if attaching and (requested or (new_node != owner and facts.upgrade_requested(new_node))):
        return attach_refused(volume, new_node)
    if requested:
        return _target_set_while_upgrading(old, new, volume, facts)
    if spec_str(old, TARGET) != spec_str(new, TARGET):
        return invalid(
            f"unable to change targetNodeIDForLiveUpgrade for volume {volume} {NOT_REQUESTED}", TARGET_FIELD
        )
    if old_node and spec_str(old, "image") != spec_str(new, "image"):
        return invalid(f"unable to change image for attached volume {volume} {NOT_REQUESTED}", "spec.image")
    return None


def _only_detaching(old: Obj, new: Obj) -> bool:
    """`spec.nodeID` cleared, and neither the target nor `spec.image` changed."""
    if not spec_str(old, "nodeID") or spec_str(new, "nodeID"):
        return False
    return all(spec_str(old, key) == spec_str(new, key) for key in (TARGET, "image"))


def _target_set_while_upgrading(old: Obj, new: Obj, volume: str, facts: UpgradeFacts) -> Denial | None:
    """The four rules on setting a target for the first time, while the owner node is upgrading."""
    target = spec_str(new, TARGET)
    if spec_str(old, TARGET) or not target:
        return None
    replicas = section(new, "spec").get("numberOfReplicas")
    if not isinstance(replicas, int) or replicas <= 1:  # absent reads as 0, as in Go
        return invalid(
            f"unable to change targetNodeIDForLiveUpgrade for volume {volume} when the volume has only "
            f"one replica {DURING}",
            TARGET_FIELD,
        )
    if target == spec_str(old, "nodeID"):
        return invalid(
            f"unable to change targetNodeIDForLiveUpgrade for volume {volume} to the same node {target} "
            f"{DURING}",
            TARGET_FIELD,
        )
    image = facts.default_instance_manager_image()
    if spec_str(old, "image") == image:
        return invalid(f"volume {volume} is already using instance manager image {image}", "spec.image")
    if spec_str(new, "image") != image:
        return invalid(f"volume {volume} should use instance manager image {image}", "spec.image")
    return None
