"""The AEU scenarios of acceptance-scenarios.md §1, in the sandbox, through the whole stack:
watcher → LH_OBJECTS → engine-upgrade → LH_COMMANDS → actuator → the emulator, whose state the
simulator (playing Longhorn's volume controller) carries on. Invariants are asserted at every
observation of the emulator, not only at the end.

Simulated durations are fractions of a second (fast_config), so the "150 s negative windows" of the
Longhorn tests are a few seconds here: still many times the longest simulated step.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.simulator import SimConfig
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer, upgrading

pytestmark = pytest.mark.scenario

COMPAT = UPGRADE_IMAGE  # an older, compatible engine image the volumes start on


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(live_upgrade_seconds=1.0)


async def attached_on_compat(
    sandbox: Sandbox, names: list[str], node: str = "node-1", replicas: int = 2
) -> None:
    await sandbox.create_engine_image(COMPAT)
    await sandbox.wait_for(
        lambda: _deployed(sandbox, COMPAT), within=20, what=f"{COMPAT} deployed on every node"
    )
    for name in names:
        await sandbox.create_volume(name, replicas=replicas, image=COMPAT, node=node)
    for name in names:
        await sandbox.wait_volume(
            name,
            lambda v: v.get("status", {}).get("robustness") == "healthy",
            within=20,
            what=f"{name} healthy",
        )


async def _deployed(sandbox: Sandbox, image: str) -> bool:
    ei: dict[str, Any] = await sandbox.engine_image(image)
    return bool(ei.get("status", {}).get("state") == "deployed")


async def test_aeu_01_off_by_default(sandbox: Sandbox, stack: list[Running]) -> None:
    await attached_on_compat(sandbox, ["vol-att"])
    await sandbox.create_volume("vol-det", replicas=2, image=COMPAT)
    observer = Observer(sandbox)

    async def untouched() -> bool:
        images = await observer.images()
        return set(images.values()) == {COMPAT}

    await sandbox.stays(untouched, 3.0, what="no spec.image patched while the limit is 0")


async def test_aeu_03_per_node_cap_on_one_hot_node(sandbox: Sandbox, stack: list[Running]) -> None:
    names = [f"vol-{i}" for i in range(10)]
    await attached_on_compat(sandbox, names, node="node-1")
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "3")

    async def done() -> bool:
        return await observer.all_on(DEFAULT_IMAGE, set(names))

    await sandbox.wait_for(
        done, within=60, interval=0.05, what="all 10 on the default image", invariant=observer.limit_holds(3)
    )
    assert observer.max_in_flight["node-1"] == 3, "the wave never used the node's three slots"


async def test_aeu_04_per_node_not_global(sandbox: Sandbox, stack: list[Running]) -> None:
    names = {node: [f"{node}-vol-{i}" for i in range(3)] for node in ("node-1", "node-2", "node-3")}
    await sandbox.create_engine_image(COMPAT)
    await sandbox.wait_for(lambda: _deployed(sandbox, COMPAT), within=20, what="compat deployed")
    for node, vols in names.items():
        for name in vols:
            await sandbox.create_volume(name, replicas=2, image=COMPAT, node=node)
    everything = {n for vols in names.values() for n in vols}
    for name in everything:
        await sandbox.wait_volume(
            name, lambda v: v.get("status", {}).get("robustness") == "healthy", within=20
        )
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "1")
    await sandbox.wait_for(
        lambda: observer.all_on(DEFAULT_IMAGE, everything),
        within=60,
        interval=0.05,
        what="all 9 on the default image",
        invariant=observer.limit_holds(1),
    )
    assert len(observer.max_in_flight) == 3  # every node had its own upgrade going


async def test_aeu_05_limit_raised_and_lowered_mid_wave(sandbox: Sandbox, stack: list[Running]) -> None:
    names = [f"vol-{i}" for i in range(10)]
    await attached_on_compat(sandbox, names, node="node-1")
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "1")
    await sandbox.wait_for(
        lambda: _in_flight_at_least(observer, 1),
        within=20,
        what="first upgrade",
        invariant=observer.limit_holds(1),
    )
    await sandbox.set_setting(LIMIT_SETTING, "4")
    await sandbox.wait_for(
        lambda: _in_flight_at_least(observer, 4),
        within=20,
        what="four in flight",
        invariant=observer.limit_holds(4),
    )
    await sandbox.set_setting(LIMIT_SETTING, "1")
    # no new start until in flight drops below 1 again: the count only goes down to 1, then holds at ≤ 1
    seen_below = False

    async def lowered() -> None:
        nonlocal seen_below
        counts = await observer.in_flight()
        if counts["node-1"] <= 1:
            seen_below = True
        elif seen_below:
            raise AssertionError(f"a new upgrade started over the lowered limit: {counts}")

    await sandbox.wait_for(
        lambda: observer.all_on(DEFAULT_IMAGE, set(names)),
        within=60,
        interval=0.05,
        what="all done",
        invariant=lowered,
    )


async def _in_flight_at_least(observer: Observer, count: int) -> bool:
    return (await observer.in_flight())["node-1"] >= count


async def test_aeu_06_disable_mid_wave(sandbox: Sandbox, stack: list[Running]) -> None:
    names = [f"vol-{i}" for i in range(8)]
    await attached_on_compat(sandbox, names, node="node-1")
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "3")
    await sandbox.wait_for(
        lambda: _in_flight_at_least(observer, 3),
        within=20,
        what="three in flight",
        invariant=observer.limit_holds(3),
    )
    await sandbox.set_setting(LIMIT_SETTING, "0")
    started = {n for n, image in (await observer.images()).items() if image == DEFAULT_IMAGE}

    async def finished_and_nothing_new() -> bool:
        volumes = await observer.volumes()
        on_default = {v["metadata"]["name"] for v in volumes if v["spec"].get("image") == DEFAULT_IMAGE}
        assert on_default <= started, (
            f"new upgrades started after the limit went to 0: {on_default - started}"
        )
        return not any(upgrading(v) for v in volumes)

    await sandbox.wait_for(
        finished_and_nothing_new, within=30, interval=0.05, what="the in-flight upgrades to finish"
    )
    await sandbox.stays(
        lambda: _nothing_new(observer, started), 2.0, what="nothing new starts while disabled"
    )


async def _nothing_new(observer: Observer, started: set[str]) -> bool:
    images = await observer.images()
    return {n for n, i in images.items() if i == DEFAULT_IMAGE} <= started


async def test_aeu_08_degraded_is_skipped_until_healthy(sandbox: Sandbox, stack: list[Running]) -> None:
    await attached_on_compat(sandbox, ["vol-d"], replicas=3)
    await sandbox.patch("volumes", "vol-d", {"spec": {"numberOfReplicas": 4}})  # 4 replicas on 3 nodes
    await sandbox.wait_volume("vol-d", lambda v: v["status"].get("robustness") == "degraded", within=20)
    await sandbox.set_setting(LIMIT_SETTING, "3")
    observer = Observer(sandbox)
    await sandbox.stays(
        lambda: _image_is(observer, "vol-d", COMPAT), 3.0, what="degraded vol-d stays on compat"
    )
    await sandbox.patch("volumes", "vol-d", {"spec": {"numberOfReplicas": 3}})
    await sandbox.wait_volume(
        "vol-d",
        lambda v: v["status"].get("currentImage") == DEFAULT_IMAGE,
        within=30,
        what="vol-d upgraded once healthy",
    )


async def _image_is(observer: Observer, name: str, image: str) -> bool:
    return (await observer.images())[name] == image


async def test_aeu_18_volumes_deleted_mid_wave(sandbox: Sandbox, stack: list[Running]) -> None:
    names = [f"vol-{i}" for i in range(10)]
    await attached_on_compat(sandbox, names, node="node-1")
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "2")
    await sandbox.wait_for(
        lambda: _in_flight_at_least(observer, 2),
        within=20,
        what="two in flight",
        invariant=observer.limit_holds(2),
    )
    for name in names:
        await sandbox.delete("volumes", name)

    async def gone() -> bool:
        return not await observer.volumes()

    await sandbox.wait_for(
        gone, within=30, interval=0.05, what="every volume deleted", invariant=observer.limit_holds(2)
    )
    await sandbox.stays(lambda: _no_volumes(observer), 1.0, what="no deleted volume comes back")


async def _no_volumes(observer: Observer) -> bool:
    return not await observer.volumes()
