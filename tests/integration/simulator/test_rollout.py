"""SIM-VER and the SIM-IM start delay through the API: a Longhorn rollout switches the settings,
creates the new default engine image, and brings up new instance managers whose pods take a while;
meanwhile running volumes carry on in the old ones and attaching volumes wait for the new ones."""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.simulator import LonghornRelease, SimConfig, roll_out
from corral_sandbox.simulator.objects import engine_image_name
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox, fast_config

NEW_IMAGE = "longhornio/longhorn-engine:v1.11.0"
NEW_IM_IMAGE = "longhornio/longhorn-instance-manager:v1.11.0"
RELEASE = LonghornRelease("v1.11.0", NEW_IMAGE, NEW_IM_IMAGE)


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(im_startup_seconds=1.0, engine_image_deploy_seconds=0.2)


def state(volume: dict[str, Any]) -> tuple[str, str]:
    st = volume.get("status", {})
    return st.get("state", ""), st.get("robustness", "")


async def settings(sandbox: Sandbox) -> dict[str, str]:
    return {s["metadata"]["name"]: s.get("value", "") for s in await sandbox.list("settings")}


async def test_a_rollout_brings_new_images_and_instance_managers(sandbox: Sandbox) -> None:
    await sandbox.create_volume("vol-up", replicas=3, node="node-1")  # busy old IMs on every node
    await sandbox.create_volume("vol-later", replicas=2)
    await sandbox.wait_volume("vol-up", lambda v: state(v) == ("attached", "healthy"))
    await sandbox.wait_volume("vol-later", lambda v: state(v)[0] == "detached")

    await roll_out(sandbox.simulator, RELEASE)
    values = await settings(sandbox)
    assert values["current-longhorn-version"] == "v1.11.0"
    assert values["default-engine-image"] == NEW_IMAGE
    assert values["default-instance-manager-image"] == NEW_IM_IMAGE
    assert await sandbox.find("engineimages", engine_image_name(NEW_IMAGE)) is not None
    await sandbox.patch("volumes", "vol-later", {"spec": {"nodeID": "node-2"}})

    async def new_managers_running() -> bool:
        ims = [im for im in await sandbox.list("instancemanagers") if im["spec"]["image"] == NEW_IM_IMAGE]
        return len(ims) == 3 and all(im.get("status", {}).get("currentState") == "running" for im in ims)

    seen_waiting = False

    async def running_volume_carries_on() -> None:
        nonlocal seen_waiting
        up = await sandbox.get("volumes", "vol-up")
        assert state(up) == ("attached", "healthy"), f"vol-up disturbed by the rollout: {up['status']}"
        if not await new_managers_running():
            later = await sandbox.get("volumes", "vol-later")
            assert state(later)[0] != "attached", "attached before an instance manager it may use runs"
            seen_waiting = seen_waiting or state(later)[0] == "attaching"

    await sandbox.wait_for(
        new_managers_running,
        within=20,
        what="new instance managers running",
        invariant=running_volume_carries_on,
    )
    assert seen_waiting, "vol-later was never seen waiting for the new instance manager"
    await sandbox.wait_volume("vol-later", lambda v: state(v) == ("attached", "healthy"), within=20)

    async def deployed() -> bool:
        ei = await sandbox.engine_image(NEW_IMAGE)
        return bool(ei.get("status", {}).get("state") == "deployed")

    await sandbox.wait_for(deployed, within=20, what="the new default engine image deployed")
    # nothing upgraded anyone's engine: that is the auto-upgrade's (corral's) job, off by default
    for name in ("vol-up", "vol-later"):
        assert (await sandbox.get("volumes", name))["spec"]["image"] == DEFAULT_IMAGE

    # the old instance managers stay while vol-up's processes run in them, and go once it detaches
    old = [im for im in await sandbox.list("instancemanagers") if im["spec"]["image"] != NEW_IM_IMAGE]
    assert len(old) == 3
    await sandbox.patch("volumes", "vol-up", {"spec": {"nodeID": ""}})

    async def old_managers_gone() -> bool:
        return all(im["spec"]["image"] == NEW_IM_IMAGE for im in await sandbox.list("instancemanagers"))

    await sandbox.wait_for(old_managers_gone, within=20, what="idle old instance managers removed")


async def test_a_second_rollout_to_the_same_release_changes_nothing(sandbox: Sandbox) -> None:
    await roll_out(sandbox.simulator, RELEASE)
    before = await sandbox.engine_image(NEW_IMAGE)
    await roll_out(sandbox.simulator, RELEASE)
    after = await sandbox.engine_image(NEW_IMAGE)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
