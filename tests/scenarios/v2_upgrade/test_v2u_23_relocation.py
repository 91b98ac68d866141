"""V2U-23 (acceptance-scenarios.md §5.4; Longhorn's e2e "Test V2 Volume Engine Live Switchover"): the
relocation primitive. An attached v2 volume's target moves node-1 → node-2 → node-3 → node-1 through
the volume's `spec.targetNodeIDForLiveUpgrade`, written as v2-upgrade's commands write it. At every
observation the volume stays attached to node-1 with its frontend (the engine's `spec.nodeID`)
there; after each move the engine CR follows the target (`currentTargetNodeIDForLiveUpgrade`,
`targetIP`); SIM-IO shows one gap per move, each within the documented switch-over budget
(`SimConfig.switchover_io_gap_budget`), and no detach.

A plain sandbox test: the writes are played by hand, on a node whose data-engine upgrade has been
requested and with the new default image, as §5.3's admission rules ask of a target change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from corral_sandbox.seeds import Seed
from corral_sandbox.seeds.v2 import v2_seed
from corral_sandbox.simulator import SimConfig
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import Sandbox, fast_config

pytestmark = pytest.mark.scenario

VOLUME = "v2-vol-001"
NEW_IM = "longhornio/longhorn-instance-manager:v1.11.0"


@pytest.fixture
def sandbox_seed() -> Seed:
    return v2_seed(nodes=3, volumes=1, attached_to="node-1")


@pytest.fixture
def sandbox_config() -> SimConfig:
    # steps long enough that a busy host's round trips hide inside them (README: the budget)
    return fast_config(v2_suspend_seconds=0.05, v2_switch_seconds=0.1, v2_resume_seconds=0.05)


def target_on(node: str) -> Callable[[dict[str, Any]], bool]:
    return lambda volume: bool(volume["status"].get("currentTargetNodeIDForLiveUpgrade") == node)


def _condition(obj: dict[str, Any], kind: str) -> str:
    return next((c["status"] for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), "")


async def test_v2u_23_the_target_moves_round_the_nodes_while_the_frontend_stays(sandbox: Sandbox) -> None:
    await sandbox.wait_volume(
        VOLUME,
        lambda v: (
            v.get("status", {}).get("state") == "attached"
            and v.get("status", {}).get("robustness") == "healthy"
        ),
        what=f"{VOLUME} attached and healthy",
    )
    await sandbox.set_setting("default-instance-manager-image", NEW_IM)
    upgrade = lh_objects.node_data_engine_upgrade(
        "mgr-node-1-00000001", sandbox.namespace, node="node-1", image=NEW_IM, manager="mgr"
    )
    await sandbox.objects_api.create_namespaced_custom_object(
        "corral.longhorn.io", "v1alpha1", sandbox.namespace, "nodedataengineupgrades", upgrade
    )

    async def requested() -> bool:
        return _condition(await sandbox.get("nodes", "node-1"), "DataEngineUpgradeRequested") == "True"

    await sandbox.wait_for(requested, what="node-1 DataEngineUpgradeRequested=True")

    async def frontend_stays() -> None:
        volume = await sandbox.get("volumes", VOLUME)
        engine = await sandbox.engine_of(VOLUME)
        assert volume["status"]["state"] == "attached", volume["status"]
        assert volume["spec"]["nodeID"] == volume["status"]["currentNodeID"] == "node-1"
        assert engine["spec"]["nodeID"] == "node-1", "the frontend never leaves the attached node"

    async def v2_im_ip(node: str) -> str:
        for im in await sandbox.list("instancemanagers"):
            if im["spec"]["nodeID"] == node and im["spec"]["dataEngine"] == "v2":
                return str(im["status"].get("ip", ""))
        raise AssertionError(f"no v2 IM on {node}")

    for step, target in enumerate(("node-2", "node-3", "node-1")):
        changes: dict[str, Any] = {"targetNodeIDForLiveUpgrade": target}
        if step == 0:
            changes["image"] = NEW_IM  # the first move carries the new image (§5.3)
        await sandbox.patch("volumes", VOLUME, {"spec": changes})
        volume = await sandbox.wait_volume(
            VOLUME,
            target_on(target),
            what=f"{VOLUME}'s target on {target}",
            invariant=frontend_stays,
        )
        assert volume["status"]["currentImage"] == NEW_IM
        engine = await sandbox.engine_of(VOLUME)
        assert engine["status"]["currentTargetNodeIDForLiveUpgrade"] == target, "the engine CR follows"
        assert engine["status"]["targetIP"] == await v2_im_ip(target)
        assert engine["status"]["currentState"] == "running"

    await sandbox.patch("volumes", VOLUME, {"spec": {"targetNodeIDForLiveUpgrade": ""}})
    await sandbox.wait_volume(
        VOLUME,
        lambda v: not v["status"].get("currentTargetNodeIDForLiveUpgrade"),
        what="the current target cleared",
        invariant=frontend_stays,
    )
    await frontend_stays()

    io = sandbox.simulator.memory.io[VOLUME]
    config = sandbox.simulator.config
    assert io.detaches == 0 and io.attached and io.serving
    assert len(io.gaps) == 3, "one gap per move, none for clearing a target already home"
    for gap in io.gaps:
        assert gap.end is not None and gap.reasons == ["suspended"]
        assert gap.seconds(0.0) <= config.switchover_io_gap_budget, (gap, config.switchover_io_gap_budget)
