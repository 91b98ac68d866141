"""V2U-17 (B): the target image changed mid-flight (acceptance-scenarios.md §5.4).

node-1's volumes are relocating to node-2 (held there: the simulator creates no target on node-2
until released) when `default-instance-manager-image` changes again. node-1's attempt is aborted
(`target-image-changed`), its volumes restored (target back on node-1, `spec.image` back to the
recorded `previousImage`), and node-1 reset to `pending` **without** using a retry; its next
attempt and every node after it upgrade to the newer image.
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.control import SandboxControl
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import MANAGERS, NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

VOLUMES = ("vol-1", "vol-2", "vol-3")


def volumes_when_ended(observer: UpgradeObserver, upgrade: str) -> dict[str, dict[str, Any]]:
    """The volumes as they were when the node upgrade `upgrade` reached a terminal state."""
    volumes: dict[str, dict[str, Any]] = {}
    for write in observer.writes:
        if write.plural == "volumes" and write.new is not None:
            volumes[write.name] = write.new
        mine = write.plural == NODE_UPGRADES and write.name == upgrade
        if mine and scenario.state(write.new) in ("completed", "error"):
            return volumes
    raise AssertionError(f"{upgrade} never ended")


async def test_the_node_in_flight_is_restored_and_restarted_on_the_new_image(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    control = SandboxControl.from_kubeconfig(sandbox.cluster.kubeconfig_path)
    await scenario.settled(sandbox)
    await control.block_target("node-2")
    await scenario.pull_image(sandbox, scenario.NEWER_IM)
    await scenario.start_upgrade(sandbox)

    async def relocating() -> dict[str, Any] | None:
        upgrades = await scenario.node_upgrades(sandbox, "node-1")
        return upgrades[0] if upgrades and scenario.state(upgrades[0]) == "switching-over" else None

    first = await sandbox.wait_for(
        relocating, within=60, what="node-1 switching over", invariant=observer.holds
    )
    await scenario.set_target_image(sandbox, scenario.NEWER_IM)

    async def aborted() -> bool:
        [now, *_] = await scenario.node_upgrades(sandbox, "node-1")
        return bool((now.get("status") or {}).get("abortReason"))

    await sandbox.wait_for(aborted, within=60, what="node-1's attempt aborted", invariant=observer.holds)
    await control.unblock_target("node-2")
    manager = await scenario.wait_manager(sandbox, observer, "completed", within=120)

    # the first attempt: aborted for the new image, restored, ended
    name = first["metadata"]["name"]
    ended = observer.versions(NODE_UPGRADES, name)[-1]
    assert ended["status"]["abortReason"] == "target-image-changed"
    assert ended["status"]["abortedIn"] == "switching-over"
    assert ended["status"]["state"] == "error"
    assert ended["status"]["message"] == "aborted (target-image-changed) in switching-over; restored"
    restored = volumes_when_ended(observer, name)
    for volume in VOLUMES:
        previous = ended["status"]["volumes"][volume]["previousImage"]
        assert restored[volume]["spec"]["image"] == previous != scenario.NEW_IM, (
            volume,
            restored[volume]["spec"],
        )
        assert restored[volume]["spec"].get("targetNodeIDForLiveUpgrade") in (None, "", "node-1")
        assert restored[volume]["status"]["state"] == "attached"

    # reset to pending without a retry; the next attempt, and every node after, on the newer image
    entries = [
        (v.get("status") or {}).get("upgradeNodes", {}).get("node-1", {}) for v in observer.versions(MANAGERS)
    ]
    assert any(e.get("state") == "pending" and e.get("attempts") == 1 for e in entries), entries
    node_1 = manager["status"]["upgradeNodes"]["node-1"]
    assert node_1["state"] == "completed" and not node_1.get("retries") and node_1["attempts"] == 2
    assert manager["status"]["instanceManagerImage"] == scenario.NEWER_IM
    images = [
        (u["spec"]["nodeID"], u["spec"]["instanceManagerImage"]) for u in observer.created(NODE_UPGRADES)
    ]
    assert images == [
        ("node-1", scenario.NEW_IM),
        ("node-1", scenario.NEWER_IM),
        ("node-2", scenario.NEWER_IM),
        ("node-3", scenario.NEWER_IM),
    ]
    for node in scenario.NODES:
        ims = await scenario.v2_instance_managers(sandbox, node)
        assert [im["spec"]["image"] for im in ims] == [scenario.NEWER_IM], (node, ims)
    for volume in VOLUMES:
        obj = await sandbox.get("volumes", volume)
        assert obj["status"]["state"] == "attached" and obj["status"]["currentImage"] == scenario.NEWER_IM
