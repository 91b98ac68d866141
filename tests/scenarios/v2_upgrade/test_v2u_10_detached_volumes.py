"""V2U-10: detached volumes are finalised (acceptance-scenarios.md §5.4).

`vol-d` was attached on node-1 and detached by its operator before the upgrade (node-1 still owns
it); `vol-1` stays attached there. node-1's upgrade lists `vol-d`, switches only `vol-1`, and in
`finalizing` sets `vol-d`'s `spec.image` to the new IM image. Attached again afterwards, `vol-d`
starts on node-1's new instance manager.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.seeds.model import Seed
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver


@pytest.fixture
def sandbox_seed() -> Seed:
    return scenario.v2_seed([scenario.v2_volume("vol-1"), scenario.v2_volume("vol-d")])


def node_1_state_when_image_set(observer: UpgradeObserver, volume: str, image: str) -> str:
    """node-1's upgrade state at the write that set the volume's `spec.image` to `image`."""
    state = ""
    for write in observer.writes:
        if (
            write.plural == NODE_UPGRADES
            and write.new is not None
            and write.new["spec"]["nodeID"] == "node-1"
        ):
            state = str((write.new.get("status") or {}).get("state", ""))
        if (
            write.plural == "volumes"
            and write.name == volume
            and write.old is not None
            and write.new is not None
            and write.old["spec"].get("image") != image == write.new["spec"].get("image")
        ):
            return state
    raise AssertionError(f"{volume}'s spec.image was never set to {image}")


async def test_a_detached_volume_takes_the_new_image_in_finalizing(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.settled(sandbox)
    await sandbox.patch("volumes", "vol-d", {"spec": {"nodeID": ""}})

    async def detached() -> dict[str, Any] | None:
        volume = await sandbox.get("volumes", "vol-d")
        return volume if volume["status"]["state"] == "detached" else None

    volume = await sandbox.wait_for(detached, within=30, what="vol-d detached", invariant=observer.holds)
    assert volume["status"]["ownerID"] == "node-1"
    old_image = volume["spec"]["image"]
    await scenario.start_upgrade(sandbox)
    await scenario.wait_manager(sandbox, observer, "completed", within=120)

    [upgrade] = [u for u in observer.created(NODE_UPGRADES) if u["spec"]["nodeID"] == "node-1"]
    final = observer.versions(NODE_UPGRADES, upgrade["metadata"]["name"])[-1]
    assert final["status"]["volumes"]["vol-d"]["state"] == "completed"
    assert node_1_state_when_image_set(observer, "vol-d", scenario.NEW_IM) == "finalizing"
    targets = observer.values("volumes", "vol-d", "spec", "targetNodeIDForLiveUpgrade")
    assert [t for t in targets if t] == [], "a detached volume was switched over"

    # attached again, it starts on node-1's new instance manager
    volume = await sandbox.get("volumes", "vol-d")
    assert volume["spec"]["image"] == scenario.NEW_IM and volume["status"]["state"] == "detached"
    assert old_image != scenario.NEW_IM
    await sandbox.patch("volumes", "vol-d", {"spec": {"nodeID": "node-1"}})

    async def attached() -> dict[str, Any] | None:
        obj = await sandbox.get("volumes", "vol-d")
        return obj if obj["status"]["state"] == "attached" else None

    volume = await sandbox.wait_for(attached, within=30, what="vol-d attached", invariant=observer.holds)
    assert volume["status"]["currentImage"] == scenario.NEW_IM
    new_im = await scenario.running_v2_im(sandbox, "node-1", scenario.NEW_IM)
    assert new_im is not None
    engine = await sandbox.engine_of("vol-d")
    assert engine["status"]["instanceManagerName"] == new_im["metadata"]["name"]
