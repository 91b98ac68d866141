"""V2U-15: v1 is untouched (acceptance-scenarios.md §5.4).

v1 volumes attached on node-1 and node-2 (the nodes the upgrade goes through first) beside two v2
volumes on node-1. Throughout the upgrade the stack's observer judges every write to v1 volumes,
replicas, instance managers and their pods (invariants.py); at the end the v1 instance managers
that serve them still run the very same pods (uid, restart count), hold the same engines and
replicas, and the v1 volumes are attached and healthy with the replicas they had.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.seeds.model import Seed
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import restart_count, serving
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

V1_VOLUMES = ("v1-a", "v1-b")


@pytest.fixture
def sandbox_seed() -> Seed:
    return scenario.v2_seed(
        [
            scenario.v2_volume("vol-1"),
            scenario.v2_volume("vol-2"),
            scenario.v1_volume("v1-a", owner="node-1"),
            scenario.v1_volume("v1-b", owner="node-2"),
        ]
    )


async def v1_picture(sandbox: Sandbox) -> dict[str, Any]:
    """What must not change: the serving v1 IMs' pods and instances, the v1 replicas, the v1
    volumes' specs."""
    ims = {}
    for im in await sandbox.list("instancemanagers"):
        if im["spec"].get("dataEngine") != "v1" or not serving(im):
            continue
        pod = sandbox.emulator.get("", "pods", sandbox.namespace, im["metadata"]["name"])
        assert pod is not None
        status = im.get("status") or {}
        ims[im["metadata"]["name"]] = {
            "pod": pod["metadata"]["uid"],
            "restarts": restart_count(pod),
            "engines": sorted(status.get("instanceEngines") or {}),
            "replicas": sorted(status.get("instanceReplicas") or {}),
        }
    replicas = sorted(
        (r["metadata"]["name"], r["spec"]["nodeID"])
        for r in await sandbox.list("replicas")
        if r["spec"].get("dataEngine", "v1") == "v1"
    )
    volumes = {v: (await sandbox.get("volumes", v))["spec"] for v in V1_VOLUMES}
    return {"ims": ims, "replicas": replicas, "volumes": volumes}


async def test_v1_volumes_and_instance_managers_see_no_change(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    await scenario.settled(sandbox)
    before = await v1_picture(sandbox)
    assert {engine for im in before["ims"].values() for engine in im["engines"]} == {
        f"{v}-e-0" for v in V1_VOLUMES
    }
    await scenario.start_upgrade(sandbox)
    await scenario.wait_manager(sandbox, observer, "completed", within=120)

    after = await v1_picture(sandbox)
    assert after == before
    for volume in V1_VOLUMES:
        obj = await sandbox.get("volumes", volume)
        assert obj["status"]["state"] == "attached" and obj["status"]["robustness"] == "healthy"
