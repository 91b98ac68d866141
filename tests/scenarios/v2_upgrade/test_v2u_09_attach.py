"""V2U-09: while node-1 is being upgraded, a v2 volume cannot be attached to it (neither by an update
nor by creating it attached), a volume attached there can be detached, and once the node's upgrade
has completed the attach works again. Against the sandbox's API server, which plays corral's
volume webhook (`corral_v2admission`, longhorn-behaviour.md §5.3).

The node's `DataEngineUpgradeRequested` condition is what the rules read. The scenario creates the
NodeDataEngineUpgrade that makes Longhorn's node controller set it and writes the condition as
that controller would (`set_upgrade_requested`), so the scenario does not depend on the sandbox's
node controller (SIM-V2) and agrees with it when it runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.seeds import Seed, seed_from_dict
from corral_sandbox.simulator import objects
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.v2_admission import (
    NODE_UPGRADES,
    UpgradeCRs,
    node_upgrade_body,
    refusal,
    set_upgrade_requested,
)

pytestmark = pytest.mark.scenario

DENIED = 'admission webhook "volumes.v2.corral.longhorn.io" denied the request: '
DURING = "during v2 data engine upgrade"


def attach_refused(volume: str) -> tuple[int, str]:
    return 422, DENIED + f"volume {volume} is not allowed to attach to node node-1 {DURING}"


@pytest.fixture
def sandbox_seed() -> Seed:
    return seed_from_dict(
        {
            "nodes": [{"name": f"node-{i}", "hugepages": "2Gi"} for i in (1, 2, 3)],
            "settings": {"v2-data-engine": "true"},
            "generate": {"volumes": 0},
        }
    )


def v2_volume(sandbox: Sandbox, name: str, image: str, node: str = "") -> dict[str, Any]:
    return objects.volume(name, sandbox.namespace, image=image, replicas=2, node_id=node, data_engine="v2")


async def state_of(sandbox: Sandbox, name: str, state: str) -> None:
    await sandbox.wait_volume(
        name, lambda v: v.get("status", {}).get("state") == state, what=f"{name} {state}"
    )


async def test_attach_to_an_upgrading_node_is_refused_detach_allowed(sandbox: Sandbox) -> None:
    image = (await sandbox.get("settings", "default-instance-manager-image"))["value"]
    await sandbox.create("volumes", v2_volume(sandbox, "vol-on", image, node="node-1"))
    await sandbox.create("volumes", v2_volume(sandbox, "vol-off", image))
    await state_of(sandbox, "vol-on", "attached")
    await state_of(sandbox, "vol-off", "detached")

    crs = UpgradeCRs(sandbox)
    await crs.create(NODE_UPGRADES, node_upgrade_body("upgrade-node-1", "node-1", "upgrade", image))
    await set_upgrade_requested(sandbox, "node-1", True)

    code, message = await refusal(sandbox.patch("volumes", "vol-off", {"spec": {"nodeID": "node-1"}}))
    assert (code, message) == (
        422,
        DENIED + f"volume vol-off is not allowed to attach to node node-1 {DURING}",
    )
    code, message = await refusal(sandbox.create("volumes", v2_volume(sandbox, "vol-new", image, "node-1")))
    assert (code, message) == (
        422,
        DENIED + f"volume vol-new is not allowed to attach to node node-1 {DURING}",
    )
    assert (await sandbox.get("volumes", "vol-off"))["spec"]["nodeID"] == ""
    assert await sandbox.find("volumes", "vol-new") is None

    await sandbox.patch("volumes", "vol-on", {"spec": {"nodeID": ""}})
    await state_of(sandbox, "vol-on", "detached")

    # a v1 volume is not the upgrade's business: it attaches to node-1 as ever
    await sandbox.create_volume("vol-v1", node="node-1")
    await state_of(sandbox, "vol-v1", "attached")

    await crs.set_state(NODE_UPGRADES, "upgrade-node-1", "completed")
    await set_upgrade_requested(sandbox, "node-1", False)
    await sandbox.patch("volumes", "vol-off", {"spec": {"nodeID": "node-1"}})
    await sandbox.create("volumes", v2_volume(sandbox, "vol-new", image, "node-1"))
    await state_of(sandbox, "vol-off", "attached")
    await state_of(sandbox, "vol-new", "attached")
