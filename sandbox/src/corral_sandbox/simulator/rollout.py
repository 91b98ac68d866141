"""SIM-VER: a Longhorn version rollout, as the first new longhorn-manager to start performs it
(longhorn-manager `app/daemon.go` and `upgrade/util` at 5ddaa369):

1. `current-longhorn-version` is recorded (the upgrade step, before the controllers start);
2. `default-engine-image` and `default-instance-manager-image` take the new manager's images
   (`UpdateCustomizedSettings`) — before the new engine image even exists;
3. the new default EngineImage is created (`DeployEngineImage`) if it is missing.

Everything after that is the simulated controllers' ordinary work: the new engine image deploys
node by node (`engine_image_deploy_seconds`), a new default instance manager appears on every node
and its pod starts after `im_startup_seconds`, new v1 instances wait for it (instances.py), and old
instance managers go once nothing runs in them. That is the window of Longhorn's T1.5 race (auto
upgrade while the new default IM is still starting). Not modelled: the manager DaemonSet rollout
itself (old and new managers side by side) and the pre-upgrade hook Job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubernetes_asyncio import client

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.config import ManagerVersions
from corral_sandbox.simulator.setting_webhooks import FROM_LONGHORN

if TYPE_CHECKING:
    from corral_sandbox.simulator.runner import Simulator


@dataclass(frozen=True)
class LonghornRelease:
    """The images and version a Longhorn release installs; `manager`: the engine API constants its
    manager vendors (None keeps the simulator's)."""

    version: str
    engine_image: str
    instance_manager_image: str
    manager: ManagerVersions | None = None


async def roll_out(sim: Simulator, release: LonghornRelease) -> None:
    """Upgrade the simulated Longhorn to `release`, writing through the simulator's own API client."""
    if release.manager is not None:
        sim.reconfigure(manager=release.manager)
    await _set(sim, "current-longhorn-version", release.version)
    await _set(sim, "default-engine-image", release.engine_image)
    await _set(sim, "default-instance-manager-image", release.instance_manager_image)
    name = objects.engine_image_name(release.engine_image)
    if sim.view.get("engineimage", name) is None:
        try:
            answer = await sim.io.create(
                "engineimage", objects.engine_image(release.engine_image, sim.config.namespace)
            )
            sim.view.upsert("engineimage", answer)
        except client.ApiException as error:
            if error.status != 409:  # created meanwhile (an operator deployed it first): fine
                raise
    sim.wake()


async def _set(sim: Simulator, setting: str, value: str) -> None:
    # the manager's own write: the annotation lets a read-only setting through the webhook (§3.2)
    body = {"metadata": {"annotations": {FROM_LONGHORN: ""}}, "value": value}
    await sim.io.patch("setting", setting, body)
    # and taken off again, as longhorn-manager's UpdateSetting does: a user's edit stays refused
    answer = await sim.io.patch("setting", setting, {"metadata": {"annotations": {FROM_LONGHORN: None}}})
    sim.view.upsert("setting", answer)
