"""The volume rules of the v2 live upgrade (longhorn-behaviour.md §5.3), one test per rule and message."""

from __future__ import annotations

from typing import Any

import pytest

from corral_v2admission import VOLUMES, Denial, KnownFacts, admit

NEW_IM = "longhornio/longhorn-instance-manager:v1.10.1"
OLD_IM = "longhornio/longhorn-instance-manager:v1.10.0"
UPGRADING = KnownFacts(
    upgrading={"node-1": True, "node-2": False, "node-3": False}, instance_manager_image=NEW_IM
)
QUIET = KnownFacts(
    upgrading={"node-1": False, "node-2": False, "node-3": False}, instance_manager_image=NEW_IM
)
DURING = "during v2 data engine upgrade"
NOT_REQUESTED = "when the node has not requested v2 data engine upgrade"


def volume(
    node: str = "node-1",
    *,
    engine: str = "v2",
    owner: str = "node-1",
    target: str = "",
    image: str = OLD_IM,
    replicas: int = 3,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "pvc-a"},
        "spec": {
            "dataEngine": engine,
            "nodeID": node,
            "targetNodeIDForLiveUpgrade": target,
            "image": image,
            "numberOfReplicas": replicas,
        },
        "status": {"ownerID": owner},
    }


def update(old: dict[str, Any], new: dict[str, Any], facts: KnownFacts = UPGRADING) -> Denial | None:
    return admit(VOLUMES, "UPDATE", old, new, facts)


def test_a_v2_volume_created_on_an_upgrading_node_is_refused() -> None:
    denial = admit(VOLUMES, "CREATE", None, volume(), UPGRADING)
    assert denial == Denial(
        422, "Invalid", f"volume pvc-a is not allowed to attach to node node-1 {DURING}", "spec.nodeID"
    )


def test_a_v2_volume_created_elsewhere_or_detached_is_admitted() -> None:
    assert admit(VOLUMES, "CREATE", None, volume("node-2"), UPGRADING) is None
    assert admit(VOLUMES, "CREATE", None, volume(""), UPGRADING) is None
    assert admit(VOLUMES, "CREATE", None, volume(engine="v1"), UPGRADING) is None


@pytest.mark.parametrize("engine", ["v1", "v2"])
def test_a_new_volume_has_no_target(engine: str) -> None:
    denial = admit(VOLUMES, "CREATE", None, volume("", engine=engine, target="node-2"), UPGRADING)
    assert denial == Denial(
        422,
        "Invalid",
        "spec.targetNodeIDForLiveUpgrade should be empty for a new volume",
        "spec.targetNodeIDForLiveUpgrade",
    )


def test_attach_to_the_upgrading_owner_is_refused_and_detach_allowed() -> None:
    denial = update(volume(""), volume("node-1"))
    assert (
        denial is not None
        and denial.message == f"volume pvc-a is not allowed to attach to node node-1 {DURING}"
    )
    assert update(volume("node-1"), volume("")) is None


def test_attach_to_an_upgrading_node_of_a_volume_owned_elsewhere_is_refused() -> None:
    """corral also looks at the node attached to (the LEP's rule); Longhorn only at the owner."""
    denial = update(volume("", owner="node-2"), volume("node-1", owner="node-2"))
    assert denial is not None and "attach to node node-1" in denial.message


def test_attach_elsewhere_while_nothing_upgrades_is_admitted() -> None:
    assert update(volume("", owner="node-2"), volume("node-2", owner="node-2")) is None


def test_the_switch_over_write_is_admitted() -> None:
    old = volume()
    new = volume(target="node-2", image=NEW_IM)
    assert update(old, new) is None


def test_a_target_on_a_single_replica_volume_is_refused() -> None:
    denial = update(volume(replicas=1), volume(replicas=1, target="node-2", image=NEW_IM))
    assert denial is not None and denial.field == "spec.targetNodeIDForLiveUpgrade"
    assert denial.message == (
        "unable to change targetNodeIDForLiveUpgrade for volume pvc-a when the volume has only one "
        f"replica {DURING}"
    )


def test_a_target_on_the_volume_s_own_node_is_refused() -> None:
    denial = update(volume(), volume(target="node-1", image=NEW_IM))
    assert denial is not None
    assert (
        denial.message
        == f"unable to change targetNodeIDForLiveUpgrade for volume pvc-a to the same node node-1 {DURING}"
    )


def test_a_volume_already_on_the_new_image_is_refused_a_target() -> None:
    denial = update(volume(image=NEW_IM), volume(target="node-2", image=NEW_IM))
    assert denial == Denial(
        422, "Invalid", f"volume pvc-a is already using instance manager image {NEW_IM}", "spec.image"
    )


def test_a_target_must_come_with_the_new_image() -> None:
    denial = update(volume(), volume(target="node-2", image=OLD_IM))
    assert denial == Denial(
        422, "Invalid", f"volume pvc-a should use instance manager image {NEW_IM}", "spec.image"
    )


def test_moving_and_clearing_a_target_while_upgrading_is_admitted() -> None:
    assert update(volume(target="node-2", image=NEW_IM), volume(target="node-1", image=NEW_IM)) is None
    assert update(volume(target="node-1", image=NEW_IM), volume(target="", image=NEW_IM)) is None


def test_a_target_change_when_the_node_is_not_upgrading_is_refused() -> None:
    denial = update(volume(), volume(target="node-2", image=NEW_IM), QUIET)
    assert denial == Denial(
        422,
        "Invalid",
        f"unable to change targetNodeIDForLiveUpgrade for volume pvc-a {NOT_REQUESTED}",
        "spec.targetNodeIDForLiveUpgrade",
    )
    assert update(volume(target="node-2"), volume(), QUIET) is not None


def test_an_attached_volume_keeps_its_image_when_the_node_is_not_upgrading() -> None:
    denial = update(volume(), volume(image=NEW_IM), QUIET)
    assert denial == Denial(
        422, "Invalid", f"unable to change image for attached volume pvc-a {NOT_REQUESTED}", "spec.image"
    )


def test_a_detached_volume_may_change_image() -> None:
    assert update(volume(""), volume("", image=NEW_IM), QUIET) is None


def test_a_v1_volume_never_gets_a_target() -> None:
    denial = update(volume(engine="v1"), volume(engine="v1", target="node-2"), QUIET)
    assert denial == Denial(
        422,
        "Invalid",
        "unable to set targetNodeIDForLiveUpgrade for volume when the volume is not using data engine v2",
        "spec.targetNodeIDForLiveUpgrade",
    )
    assert update(volume(engine="v1"), volume(engine="v1", image=NEW_IM), QUIET) is None


def test_an_owner_that_cannot_be_read_is_an_internal_error() -> None:
    denial = update(volume("", owner=""), volume("node-1", owner=""))
    assert denial is not None and (denial.code, denial.reason) == (500, "InternalError")
    assert denial.message.startswith('failed to get node ""')
    gone = update(volume("", owner="node-9"), volume("node-1", owner="node-9"))
    assert gone is not None and gone.message.startswith('failed to get node "node-9"')


def test_an_update_not_touching_the_judged_fields_needs_no_owner() -> None:
    old, new = volume(owner=""), volume(owner="", replicas=2)
    new["metadata"]["labels"] = {"app": "db"}
    assert update(old, new) is None


def test_a_detach_needs_no_owner() -> None:
    """Every branch allows a detach, so one that changes nothing else is not refused for an owner
    that cannot be read (a volume detached before its owner was set stayed attached, and a
    1-replica volume then held the node's upgrade in initializing)."""
    assert update(volume("node-1", owner=""), volume("", owner="")) is None
    moved = update(volume("node-1", owner=""), volume("", owner="", image=NEW_IM))
    assert moved is not None and moved.code == 500, "a detach that also changes the image is judged"
