"""IM-09 (T4.5): no CPU for a new IM generation. A one-CPU node-1 with 40 % guaranteed to each IM:
generation 1 and 2 fit beside each other (busy with a volume each), generation 3 does not and
stays Pending; corral never deletes it nor a busy IM, and once vol1 detaches the generation-1 IM
goes and generation 3 runs. Both invariants judged at every IM pod delete (scenario.py)."""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.seeds import Seed, seed_from_dict
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.im_restart.scenario import ImObserver
from tests.scenarios.im_restart.test_im import WINDOW_S, attach, detach, restarted, uids, wait_attached

pytestmark = pytest.mark.scenario

GENERATION = "longhornio/longhorn-instance-manager:v1.10.{}"


@pytest.fixture
def sandbox_seed() -> Seed:
    return seed_from_dict({"nodes": [{"name": "node-1", "cpu": "1"}, "node-2"], "generate": {"volumes": 0}})


async def _pod_of(observer: ImObserver, node: str, image: str) -> dict[str, Any] | None:
    for im in await observer.managers(node):
        if im["spec"]["image"] == image:
            return await observer.pod(im["metadata"]["name"])
    return None


async def test_im_09_a_generation_without_cpu_stays_pending_until_an_old_one_goes(
    sandbox: Sandbox, stack: list[Running], observer: ImObserver
) -> None:
    before = await uids(observer)
    await observer.set_setting("guaranteed-instance-manager-cpu", '{"v1":"40","v2":"40"}')
    pods = await restarted(sandbox, observer, before)  # T4.5 step 1: every v1 IM pod recreated
    assert {p["spec"]["containers"][0]["resources"]["requests"]["cpu"] for p in pods.values()} == {
        "400m",
        "1600m",
    }
    await attach(sandbox, "vol1", "node-1")
    await wait_attached(sandbox, "vol1", observer)

    async def roll_out(image: str) -> None:
        await sandbox.set_setting("default-instance-manager-image", image)  # the manager's write

    await roll_out(GENERATION.format(2))

    async def generation_runs(image: str) -> bool:
        pod = await _pod_of(observer, "node-1", image)
        return bool(pod and pod.get("status", {}).get("phase") == "Running")

    await sandbox.wait_for(lambda: generation_runs(GENERATION.format(2)), within=20, invariant=observer.holds)
    await attach(sandbox, "vol2", "node-1")
    await wait_attached(sandbox, "vol2", observer)
    await roll_out(GENERATION.format(3))

    async def pending_for_cpu() -> bool:
        await observer.holds()
        pod = await _pod_of(observer, "node-1", GENERATION.format(3))
        status = (pod or {}).get("status", {})
        conditions = status.get("conditions") or [{}]
        return status.get("phase") == "Pending" and "Insufficient cpu" in conditions[0].get("message", "")

    await sandbox.wait_for(pending_for_cpu, within=20, what="generation 3 Pending for CPU")
    await sandbox.stays(pending_for_cpu, WINDOW_S, what="generation 3 stays Pending, nothing deleted for it")
    await detach(sandbox, "vol1")
    await sandbox.wait_for(
        lambda: generation_runs(GENERATION.format(3)),
        within=20,
        what="generation 3 running",
        invariant=observer.holds,
    )
    images = {im["spec"]["image"] for im in await observer.managers("node-1")}
    assert GENERATION.format(0) not in images, "generation 1 removed once idle"
    assert GENERATION.format(2) in images, "generation 2 still busy with vol2"
