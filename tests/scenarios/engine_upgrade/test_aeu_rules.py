"""AEU scenarios about which volumes are upgraded (acceptance-scenarios.md §1): the basic wave,
DR, migrating, strict-local, incompatible controller API, a default image still deploying, v2 (and
the manual engine-upgrade API refusing a v2 volume).
Same stack as test_aeu.py; the rule each one exercises is longhorn-behaviour.md §1.3."""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.simulator import ImageProfile, SimConfig
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import DEFAULT_SETTING, LIMIT_SETTING, Observer

pytestmark = pytest.mark.scenario

COMPAT = UPGRADE_IMAGE
ANCIENT = "longhornio/longhorn-engine:v1.2.0"  # controller API 3: below the new image's minimum 4
NEXT = "longhornio/longhorn-engine:v1.11.0"  # a newer default, deployed slowly
IM_IMAGE = "longhornio/longhorn-instance-manager:v1.10.0"
WINDOW = 3.0  # negative windows: many times the longest simulated step here


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(
        live_upgrade_seconds=0.5,
        engine_image_deploy_seconds=0.5,
        expansion_seconds=4.0,
        images={
            ANCIENT: ImageProfile(version="v1.2.0", controller_api_version=3, controller_api_min_version=3)
        },
    )


async def deployed(sandbox: Sandbox, image: str) -> bool:
    ei: dict[str, Any] = await sandbox.engine_image(image)
    return bool(ei.get("status", {}).get("state") == "deployed")


async def engine_image(sandbox: Sandbox, image: str) -> None:
    await sandbox.create_engine_image(image)
    await sandbox.wait_for(lambda: deployed(sandbox, image), within=20, what=f"{image} deployed")


async def create(sandbox: Sandbox, name: str, *, image: str = COMPAT, node: str = "", **fields: Any) -> None:
    await sandbox.create(
        "volumes", lh_objects.volume(name, sandbox.namespace, image=image, node_id=node, replicas=2, **fields)
    )


async def settled(sandbox: Sandbox, name: str, state: str) -> None:
    def ok(v: dict[str, Any]) -> bool:
        st = v.get("status", {})
        return bool(st.get("state") == state and (state != "attached" or st.get("robustness") == "healthy"))

    await sandbox.wait_volume(name, ok, within=20, what=f"{name} {state}")


async def spec_image(sandbox: Sandbox, name: str) -> str:
    return str((await sandbox.get("volumes", name))["spec"].get("image", ""))


async def test_aeu_02_basic_wave_live_and_offline(sandbox: Sandbox, stack: list[Running]) -> None:
    await engine_image(sandbox, COMPAT)
    await create(sandbox, "vol-1", node="node-1")
    await create(sandbox, "vol-2")
    await settled(sandbox, "vol-1", "attached")
    await settled(sandbox, "vol-2", "detached")
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "3")
    await sandbox.wait_for(
        lambda: observer.all_on(DEFAULT_IMAGE, {"vol-1", "vol-2"}),
        within=30,
        what="both volumes on the default image",
        invariant=observer.limit_holds(3),
    )
    live = await sandbox.wait_volume("vol-1", lambda v: v["status"].get("robustness") == "healthy", within=20)
    assert live["status"]["currentImage"] == DEFAULT_IMAGE
    for replica in await sandbox.replicas_of("vol-2"):
        assert replica["spec"]["image"] == DEFAULT_IMAGE

    # AEU-24: reference counts afterwards (volume + engine + replicas on each image)
    async def counted() -> bool:
        old, new = await sandbox.engine_image(COMPAT), await sandbox.engine_image(DEFAULT_IMAGE)
        return bool(old["status"].get("refCount") == 0 and new["status"].get("refCount") == 8)

    await sandbox.wait_for(counted, within=20, what="compat refCount 0, default refCount 8")
    assert (await sandbox.engine_image(COMPAT))["status"].get("noRefSince")


async def test_aeu_09_dr_volume_is_skipped(sandbox: Sandbox, stack: list[Running]) -> None:
    await engine_image(sandbox, COMPAT)
    await create(sandbox, "vol-dr", node="node-1", standby=True)
    await sandbox.wait_volume(
        "vol-dr", lambda v: v.get("status", {}).get("isStandby") is True, within=20, what="standby"
    )
    await settled(sandbox, "vol-dr", "attached")
    await sandbox.set_setting(LIMIT_SETTING, "3")
    await sandbox.stays(lambda: _is(sandbox, "vol-dr", COMPAT), WINDOW, what="the DR volume stays on compat")


async def test_aeu_10_detached_expanding_volume_waits_for_the_expansion(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    """AEU-10 (T1.3): a detached volume is not upgraded while its expansion is pending, and is
    upgraded offline once it is done. longhorn-manager HEAD checks only `state == detached` for an
    offline upgrade (§1.3); this service deliberately also waits for `expansionRequired` to clear."""
    await engine_image(sandbox, COMPAT)
    await create(sandbox, "vol-exp")
    await settled(sandbox, "vol-exp", "detached")
    async with sandbox.recording("volumes", "vol-exp") as versions:
        await sandbox.patch("volumes", "vol-exp", {"spec": {"size": str(5 * 1024**3)}})
        await sandbox.wait_volume(
            "vol-exp",
            lambda v: v.get("status", {}).get("expansionRequired") is True,
            within=20,
            what="expanding",
        )
        await sandbox.set_setting(LIMIT_SETTING, "3")
        upgraded = await sandbox.wait_volume(
            "vol-exp", lambda v: v["spec"].get("image") == DEFAULT_IMAGE, within=60, what="offline upgrade"
        )
    assert upgraded["status"]["state"] == "detached"
    assert not upgraded["status"].get("expansionRequired")
    # Every version the watch delivered: never on the default image while the expansion was pending.
    expanding = [v for v in versions if v.get("status", {}).get("expansionRequired")]
    assert expanding, "the expansion was never observed"
    assert all(v["spec"]["image"] == COMPAT for v in expanding)


async def test_aeu_11_migrating_and_strict_local_wait_for_detach(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    await engine_image(sandbox, COMPAT)
    await create(sandbox, "vol-mig", node="node-1")
    await create(sandbox, "vol-local", node="node-1", data_locality="strict-local")
    for name in ("vol-mig", "vol-local"):
        await settled(sandbox, name, "attached")
    await sandbox.patch("volumes", "vol-mig", {"spec": {"migrationNodeID": "node-2"}})
    await sandbox.wait_volume(
        "vol-mig",
        lambda v: v["status"].get("currentMigrationNodeID") == "node-2",
        within=20,
        what="migrating",
    )
    await sandbox.set_setting(LIMIT_SETTING, "3")

    async def both_on_compat() -> bool:
        return await _is(sandbox, "vol-mig", COMPAT) and await _is(sandbox, "vol-local", COMPAT)

    await sandbox.stays(
        both_on_compat, WINDOW, what="migrating and strict-local volumes are not live-upgraded"
    )
    for name in ("vol-mig", "vol-local"):
        await sandbox.patch("volumes", name, {"spec": {"nodeID": "", "migrationNodeID": ""}})
    for name in ("vol-mig", "vol-local"):
        await sandbox.wait_volume(
            name,
            lambda v: v["spec"].get("image") == DEFAULT_IMAGE,
            within=30,
            what=f"{name} upgraded offline",
        )


async def test_aeu_12_incompatible_controller_api_waits_for_detach(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    await engine_image(sandbox, ANCIENT)
    await create(sandbox, "vol-old", image=ANCIENT, node="node-1")
    await settled(sandbox, "vol-old", "attached")
    await sandbox.set_setting(LIMIT_SETTING, "3")
    await sandbox.stays(lambda: _is(sandbox, "vol-old", ANCIENT), WINDOW, what="no live upgrade across APIs")
    await sandbox.patch("volumes", "vol-old", {"spec": {"nodeID": ""}})
    await sandbox.wait_volume(
        "vol-old", lambda v: v["spec"].get("image") == DEFAULT_IMAGE, within=30, what="upgraded offline"
    )


async def test_aeu_14_nothing_starts_before_the_new_default_is_deployed(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    await engine_image(sandbox, COMPAT)
    names = {"vol-a", "vol-b"}
    for name in sorted(names):
        await sandbox.create(
            "volumes", lh_objects.volume(name, sandbox.namespace, image=COMPAT, node_id="node-1", replicas=3)
        )
    for name in sorted(names):
        await settled(sandbox, name, "attached")
    await sandbox.set_setting(LIMIT_SETTING, "3")
    observer = Observer(sandbox)
    await sandbox.wait_for(
        lambda: observer.all_on(DEFAULT_IMAGE, names), within=30, what="first wave to the default"
    )
    await sandbox.set_setting(DEFAULT_SETTING, NEXT)
    await sandbox.create_engine_image(NEXT)

    async def nothing_before_deployed() -> None:
        ei = await sandbox.find("engineimages", lh_objects.engine_image_name(NEXT))
        ready = ei is not None and ei.get("status", {}).get("state") == "deployed"
        images = await observer.images()
        if not ready:
            assert NEXT not in images.values(), f"an upgrade to {NEXT} started before it was deployed"

    await sandbox.wait_for(
        lambda: observer.all_on(NEXT, names),
        within=30,
        what=f"both on {NEXT}",
        invariant=nothing_before_deployed,
    )


async def test_aeu_15_v2_volumes_are_never_auto_upgraded(sandbox: Sandbox, stack: list[Running]) -> None:
    await engine_image(sandbox, COMPAT)
    await create(sandbox, "vol-v1")
    await create(sandbox, "vol-v2", image=IM_IMAGE, data_engine="v2")
    await settled(sandbox, "vol-v1", "detached")
    v2_image = await spec_image(sandbox, "vol-v2")
    await sandbox.set_setting(LIMIT_SETTING, "3")
    await sandbox.wait_volume(
        "vol-v1", lambda v: v["spec"].get("image") == DEFAULT_IMAGE, within=30, what="v1 upgraded"
    )
    await sandbox.stays(
        lambda: _is(sandbox, "vol-v2", v2_image), WINDOW, what="the v2 volume keeps its image"
    )
    # the manual engine-upgrade API refuses a v2 volume too, even for the default image that the
    # limit allows (longhorn-behaviour.md §1.5 rule 2)
    answer = await sandbox.engine_upgrade("vol-v2", DEFAULT_IMAGE)
    assert (answer.status, answer.message) == (
        500,
        f"cannot upgrade engine for volume vol-v2 using image {DEFAULT_IMAGE}: cannot upgrade engine for "
        f"volume vol-v2 using image {DEFAULT_IMAGE} because the volume is using data engine v2",
    )
    assert await _is(sandbox, "vol-v2", v2_image)


async def _is(sandbox: Sandbox, name: str, image: str) -> bool:
    return await spec_image(sandbox, name) == image
