"""The wave guard (issue 30) through the whole stack: a bad engine image is the default on a 3-node
cluster, and its live upgrade stalls on some volumes (the sandbox's bad-image profile).

* At the threshold (3 volumes stuck) the wave pauses: the reason is on the default EngineImage and
  in a Warning Event, the upgrades in flight finish, and no other volume starts; `corral
  engine-upgrade resume` lets the healthy ones finish.
* One state earlier: 2 stuck volumes (threshold minus one) name themselves stuck and the wave goes on.
* One state later: a volume that upgraded fine and then faulted counts as the third failure.

The healthy volumes are detached, so their (offline) upgrades take `OFFLINE_S`, long beside the live
stuck bound `STUCK_LIVE_S`: the pause comes while they are still in flight, whatever the load on the
machine adds to both (margins of seconds, never a timed assertion).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral_bus import Bus
from corral_cli.commands.engine_upgrade import resume
from corral_engine_upgrade.records import WAVE_PAUSED, WAVE_RESUMED
from corral_engine_upgrade.stuck import STUCK_EVENT
from corral_engine_upgrade.wave_guard import PAUSED_EVENT
from corral_sandbox.simulator import ImageProfile, SimConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox, fast_config
from tests.fixtures.services import all_leading
from tests.scenarios.engine_upgrade.conftest import Running, actuator, engine_upgrade, watcher
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer
from tests.scenarios.engine_upgrade.test_aeu import COMPAT, attached_on_compat

pytestmark = pytest.mark.scenario

BAD = DEFAULT_IMAGE  # the default image is the bad one: its live upgrade stalls on STALLING
STALLING = frozenset({"bad-1", "bad-2", "bad-3"})
NODES = ("node-1", "node-2", "node-3")
STUCK_LIVE_S = 3.0
OFFLINE_S = 12.0


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(
        live_upgrade_seconds=0.3,
        offline_upgrade_seconds=OFFLINE_S,
        images={BAD: ImageProfile(stalls_on=STALLING)},
    )


@pytest.fixture
async def stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    url = nats_server.url
    guarded = engine_upgrade(
        url, stuck_live_s=STUCK_LIVE_S, stuck_offline_s=10 * OFFLINE_S, wave_max_failed=3
    )
    services = [watcher(kubeconfig, url), actuator(kubeconfig, url), guarded]
    async with all_leading(services):
        yield services


async def attached(sandbox: Sandbox, placed: dict[str, str]) -> None:
    """Attached, healthy volumes on COMPAT: name → node."""
    first, *rest = placed
    await attached_on_compat(sandbox, [first], node=placed[first])
    for name in rest:
        await sandbox.create_volume(name, replicas=2, image=COMPAT, node=placed[name])
    for name in rest:
        await sandbox.wait_volume(
            name,
            lambda v: v.get("status", {}).get("robustness") == "healthy",
            within=20,
            what=f"{name} healthy",
        )


async def detached_on_compat(sandbox: Sandbox, names: list[str], owner: str) -> None:
    """Detached volumes on COMPAT owned by `owner` (the simulator keeps a ready owner it is given)."""
    for name in names:
        await sandbox.create_volume(name, replicas=2, image=COMPAT)
        await sandbox.wait_volume(name, lambda v: v.get("status", {}).get("state") == "detached", within=20)
        await sandbox.patch_status("volumes", name, {"status": {"ownerID": owner}})
        await sandbox.wait_volume(name, lambda v: v["status"].get("ownerID") == owner, within=20)


async def pause_mark(sandbox: Sandbox) -> str:
    ei = await sandbox.engine_image(BAD)
    annotations = ei["metadata"].get("annotations") or {}
    paused = str(annotations.get(WAVE_PAUSED, ""))
    return "" if not paused or annotations.get(WAVE_RESUMED) == paused.split(":", 1)[0] else paused


async def events(sandbox: Sandbox, kind: str, reason: str) -> list[Any]:
    answer = await sandbox.core.list_namespaced_event(sandbox.namespace)
    return [e for e in answer.items if e.involved_object.kind == kind and e.reason == reason]


async def started(observer: Observer) -> set[str]:
    """The volumes whose upgrade to the bad image was started (spec.image is it)."""
    return {name for name, image in (await observer.images()).items() if image == BAD}


async def test_a_bad_image_pauses_the_wave_at_the_threshold_and_resume_finishes_the_healthy_ones(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    await attached(sandbox, {f"bad-{i}": node for i, node in enumerate(NODES, 1)})
    for index, node in enumerate(NODES, 1):
        await detached_on_compat(sandbox, [f"ok-{index}-1", f"ok-{index}-2"], owner=node)
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "2")

    reason = await sandbox.wait_for(lambda: pause_mark(sandbox), within=60, what="the wave paused")
    assert "3 of 6 volumes of the wave to" in reason and "stuck (in flight" in reason, reason
    # at the threshold: the three stalled volumes and the first healthy volume of each node, no more
    first = STALLING | {f"ok-{i}-1" for i in (1, 2, 3)}
    assert await started(observer) == first
    (paused_event,) = await events(sandbox, "EngineImage", PAUSED_EVENT)
    assert paused_event.type == "Warning" and reason in paused_event.message
    stuck = {e.involved_object.name for e in await events(sandbox, "Volume", STUCK_EVENT)}
    assert stuck == STALLING

    # the upgrades in flight finish; no other volume starts while the wave is paused
    async def untouched() -> bool:
        return await started(observer) == first

    await sandbox.wait_for(
        lambda: observer.all_on(BAD, {f"ok-{i}-1" for i in (1, 2, 3)}),
        within=60,
        what="the in-flight healthy upgrades finished",
        invariant=observer.limit_holds(2),
    )
    await sandbox.stays(untouched, 3.0, what="no new upgrade while the wave is paused")

    # the operator's one action: the healthy rest finish, the stalled ones stay named stuck
    assert await resume(str(sandbox.cluster.kubeconfig_path), sandbox.namespace) == 0
    assert await pause_mark(sandbox) == ""
    healthy = {f"ok-{i}-{j}" for i in (1, 2, 3) for j in (1, 2)}
    await sandbox.wait_for(
        lambda: observer.all_on(BAD, healthy),
        within=90,
        what="the healthy volumes upgraded after the resume",
        invariant=observer.limit_holds(2),
    )
    for name in STALLING:
        volume = await sandbox.get("volumes", name)
        assert volume["status"]["currentImage"] == COMPAT, f"{name} should still be stalled"


async def two_bad_one_fine(sandbox: Sandbox) -> Observer:
    """bad-1, bad-2 (stalling) and fine-3 attached, one per node, two detached volumes per node
    on the old image, the limit at 2: the wave of the two tests below."""
    await attached(sandbox, {"bad-1": "node-1", "bad-2": "node-2", "fine-3": "node-3"})
    for index, node in enumerate(NODES, 1):
        await detached_on_compat(sandbox, [f"ok-{index}-1", f"ok-{index}-2"], owner=node)
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "2")
    return observer


async def test_one_failure_below_the_threshold_names_the_stuck_volumes_and_the_wave_goes_on(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    observer = await two_bad_one_fine(sandbox)

    healthy = {"fine-3"} | {f"ok-{i}-{j}" for i in (1, 2, 3) for j in (1, 2)}
    await sandbox.wait_for(
        lambda: observer.all_on(BAD, healthy),
        within=120,
        what="every healthy volume upgraded",
        invariant=observer.limit_holds(2),
    )
    stuck = {e.involved_object.name for e in await events(sandbox, "Volume", STUCK_EVENT)}
    assert stuck == {"bad-1", "bad-2"}
    assert await pause_mark(sandbox) == ""
    assert await events(sandbox, "EngineImage", PAUSED_EVENT) == []


async def test_a_volume_that_upgraded_and_then_faulted_counts_toward_the_pause(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    observer = await two_bad_one_fine(sandbox)

    await sandbox.wait_for(lambda: observer.all_on(BAD, {"fine-3"}), within=60, what="fine-3 upgraded")

    async def two_stuck() -> bool:
        return len(await events(sandbox, "Volume", STUCK_EVENT)) == 2

    await sandbox.wait_for(two_stuck, within=60, what="bad-1 and bad-2 named stuck")
    assert await pause_mark(sandbox) == ""  # two failures: below the threshold
    for replica in await sandbox.replicas_of("fine-3"):
        sandbox.simulator.faults.fail_replica(replica["metadata"]["name"])

    reason = await sandbox.wait_for(lambda: pause_mark(sandbox), within=60, what="the wave paused")
    assert "3 of 7 volumes of the wave" in reason and reason.endswith(
        ("longhorn-system/fine-3 faulted", "longhorn-system/fine-3 degraded")
    ), reason
    assert await events(sandbox, "EngineImage", PAUSED_EVENT)
    # node-3 had both slots for its healthy volumes; node-1's and node-2's second ones never start
    before = {"bad-1", "bad-2", "fine-3", "ok-1-1", "ok-2-1", "ok-3-1", "ok-3-2"}
    assert await started(observer) == before

    async def untouched() -> bool:
        return await started(observer) == before

    await sandbox.stays(untouched, 3.0, what="no new upgrade while the wave is paused")
