"""Simulator conformance SC-01..SC-09 (acceptance-scenarios.md §6): Longhorn's own engine-upgrade tests,
replayed against the simulated controllers through kubernetes-asyncio, so that scenario tests of corral
test corral and not simulator bugs. Each test names the Longhorn test it mirrors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from corral_sandbox.simulator import ImageProfile, SimConfig
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, WRONG_IMAGE, Sandbox, fast_config

CLI_LOW = "longhornio/longhorn-engine:cli-below-min"
CLI_HIGH = "longhornio/longhorn-engine:cli-above-current"


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(
        images={
            # the manager's CLI API is 10 with minimum 8 (v1.10.0): one below the minimum, one above current
            CLI_LOW: ImageProfile(cli_api_version=7, cli_api_min_version=7),
            CLI_HIGH: ImageProfile(cli_api_version=13, cli_api_min_version=13),
        },
        non_working_images=frozenset({WRONG_IMAGE}),
    )


# --- helpers ---------------------------------------------------------------------------------------


def images_of(obj: dict[str, Any]) -> tuple[str, str]:
    return obj.get("spec", {}).get("image", ""), obj.get("status", {}).get("currentImage", "")


async def ref_count(sandbox: Sandbox, image: str) -> int:
    return int((await sandbox.engine_image(image)).get("status", {}).get("refCount", -1))


async def wait_ref_count(sandbox: Sandbox, image: str, expected: int) -> None:
    async def probe() -> bool:
        return await ref_count(sandbox, image) == expected

    await sandbox.wait_for(probe, what=f"refCount({image}) == {expected}")


async def deployed_engine_image(sandbox: Sandbox, image: str) -> dict[str, Any]:
    await sandbox.create_engine_image(image)

    async def probe() -> dict[str, Any] | None:
        ei = await sandbox.engine_image(image)
        st = ei.get("status", {})
        ready = st.get("state") == "deployed" and st.get("refCount") == 0 and st.get("noRefSince")
        return ei if ready else None

    return await sandbox.wait_for(probe, what=f"engine image {image} deployed")


def attached_healthy(volume: dict[str, Any]) -> bool:
    st = volume.get("status", {})
    return bool(st.get("state") == "attached" and st.get("robustness") == "healthy")


def detached(volume: dict[str, Any]) -> bool:
    return bool(volume.get("status", {}).get("state") == "detached")


def on_image(image: str) -> Callable[[dict[str, Any]], bool]:
    """The volume's spec and current image are both `image` (an upgrade has completed)."""
    return lambda volume: images_of(volume) == (image, image)


async def attached_volume(sandbox: Sandbox, name: str, replicas: int, node: str = "node-1") -> dict[str, Any]:
    await sandbox.create_volume(name, replicas=replicas)
    await sandbox.wait_volume(name, detached, what=f"{name} created and detached")
    await sandbox.patch("volumes", name, {"spec": {"nodeID": node}})
    return await sandbox.wait_volume(name, attached_healthy, what=f"{name} attached and healthy")


async def detach(sandbox: Sandbox, name: str) -> dict[str, Any]:
    await sandbox.patch("volumes", name, {"spec": {"nodeID": ""}})
    return await sandbox.wait_volume(name, detached, what=f"{name} detached")


async def replicas_rw(sandbox: Sandbox, volume: str, count: int) -> bool:
    modes = (await sandbox.engine_of(volume)).get("status", {}).get("replicaModeMap", {}) or {}
    return len(modes) == count and all(mode == "RW" for mode in modes.values())


def healthy_while_upgrading(sandbox: Sandbox, name: str) -> Any:
    """Invariant of a live upgrade: the volume stays attached and healthy at every observation."""

    async def check() -> None:
        volume = await sandbox.get("volumes", name)
        assert attached_healthy(volume), f"{name} left attached/healthy mid-upgrade: {volume['status']}"

    return check


async def live_upgrade(sandbox: Sandbox, name: str, image: str, count: int) -> None:
    """test_engine_live_upgrade's assertions for one direction."""
    await sandbox.patch("volumes", name, {"spec": {"image": image}})
    invariant = healthy_while_upgrading(sandbox, name)
    await sandbox.wait_volume(
        name, lambda v: images_of(v) == (image, image), what="currentImage switched", invariant=invariant
    )

    async def modes_rw() -> bool:
        return await replicas_rw(sandbox, name, count)

    await sandbox.wait_for(modes_rw, what="replicas RW", invariant=invariant)
    engine = await sandbox.engine_of(name)
    assert images_of(engine) == (image, image)
    assert engine["status"]["endpoint"] == f"/dev/longhorn/{name}"

    async def converged() -> list[dict[str, Any]] | None:
        replicas = await sandbox.replicas_of(name)
        on_new = [r for r in replicas if images_of(r) == (image, image)]
        assert len(on_new) <= count, "more replicas on the new image than the spec asks"
        return replicas if len(replicas) == count and len(on_new) == count else None

    await sandbox.wait_for(converged, what="old replicas gone", invariant=invariant)


# --- SC-01 ---------------------------------------------------------------------------------------


async def test_sc01_engine_image_lifecycle(sandbox: Sandbox) -> None:
    """SC-01 mirrors test_engine_image."""
    images = await sandbox.list("engineimages")
    assert [ei["spec"]["image"] for ei in images] == [DEFAULT_IMAGE]
    default_setting = await sandbox.get("settings", "default-engine-image")
    assert default_setting["value"] == DEFAULT_IMAGE
    default = images[0]
    assert default["status"]["refCount"] == 0 and default["status"]["noRefSince"]
    for field in ("cliAPIVersion", "controllerAPIVersion", "dataFormatVersion"):
        assert default["status"][field] > 0

    with pytest.raises(client.ApiException) as refused:
        await sandbox.delete("engineimages", default["metadata"]["name"])
    assert refused.value.status == 400 and "default engine image" in str(refused.value.body)

    duplicate = {**default, "metadata": {"name": "ei-duplicate", "namespace": sandbox.namespace}}
    duplicate.pop("status")
    with pytest.raises(client.ApiException) as refused:
        await sandbox.create("engineimages", duplicate)
    assert "already exists" in str(refused.value.body)

    for _ in range(5):
        ei = await deployed_engine_image(sandbox, UPGRADE_IMAGE)
        assert ei["status"]["incompatible"] is False
        assert all(
            ei["status"][f] > 0 for f in ("cliAPIVersion", "controllerAPIVersion", "dataFormatVersion")
        )
        assert ei["spec"]["image"] != (await sandbox.get("settings", "default-engine-image"))["value"]
        await sandbox.delete("engineimages", ei["metadata"]["name"])

        async def gone(name: str = ei["metadata"]["name"]) -> bool:
            return await sandbox.find("engineimages", name) is None

        await sandbox.wait_for(gone, what="engine image deleted")


# --- SC-02 ---------------------------------------------------------------------------------------


async def test_sc02_incompatible_engine_images(sandbox: Sandbox) -> None:
    """SC-02 mirrors test_engine_image_incompatible."""
    for image, version in ((CLI_LOW, 7), (CLI_HIGH, 13)):
        await sandbox.create_engine_image(image)

        async def flagged(image: str = image) -> dict[str, Any] | None:
            ei = await sandbox.engine_image(image)
            return ei if ei.get("status", {}).get("incompatible") is True else None

        ei = await sandbox.wait_for(flagged, what=f"{image} incompatible")
        assert ei["status"]["cliAPIVersion"] == version
        ready = [c for c in ei["status"]["conditions"] if c["type"] == "ready"]
        assert ready and ready[0]["status"] == "False" and ready[0]["reason"] == "binary"


async def test_volume_image_must_be_a_compatible_engine_image(sandbox: Sandbox) -> None:
    """The v1 volume webhook: spec.image must name an existing, compatible EngineImage."""
    await sandbox.create_volume("vol-w", replicas=1)
    with pytest.raises(client.ApiException) as refused:
        await sandbox.patch("volumes", "vol-w", {"spec": {"image": "longhornio/longhorn-engine:nowhere"}})
    assert "cannot find engine image" in str(refused.value.body)
    await sandbox.create_engine_image(CLI_LOW)

    async def flagged() -> bool:
        return bool((await sandbox.engine_image(CLI_LOW)).get("status", {}).get("incompatible"))

    await sandbox.wait_for(flagged, what="incompatible image flagged")
    with pytest.raises(client.ApiException) as refused:
        await sandbox.patch("volumes", "vol-w", {"spec": {"image": CLI_LOW}})
    assert "incompatible" in str(refused.value.body)


# --- SC-03 ---------------------------------------------------------------------------------------


async def test_sc03_offline_upgrade_and_downgrade(sandbox: Sandbox) -> None:
    """SC-03 mirrors test_engine_offline_upgrade."""
    new_ei = await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await sandbox.create_volume("vol-off", replicas=2)
    await sandbox.wait_volume("vol-off", detached)
    await wait_ref_count(sandbox, DEFAULT_IMAGE, 2 + 2)
    await sandbox.patch("volumes", "vol-off", {"spec": {"nodeID": "node-1"}})
    await sandbox.wait_volume("vol-off", attached_healthy)
    data = sorted(r["spec"]["dataDirectoryName"] for r in await sandbox.replicas_of("vol-off"))
    await detach(sandbox, "vol-off")

    for old, new in ((DEFAULT_IMAGE, UPGRADE_IMAGE), (UPGRADE_IMAGE, DEFAULT_IMAGE)):
        await sandbox.patch("volumes", "vol-off", {"spec": {"image": new}})
        await sandbox.wait_volume("vol-off", on_image(new))
        await wait_ref_count(sandbox, old, 0)
        await wait_ref_count(sandbox, new, 4)
        assert (await sandbox.engine_image(old))["status"]["noRefSince"]
        if new == UPGRADE_IMAGE:
            with pytest.raises(client.ApiException) as refused:
                await sandbox.delete("engineimages", new_ei["metadata"]["name"])
            assert "while being used" in str(refused.value.body)
        for replica in await sandbox.replicas_of("vol-off"):
            assert images_of(replica) == (new, "")  # detached: not running, no current image
        await sandbox.patch("volumes", "vol-off", {"spec": {"nodeID": "node-1"}})
        await sandbox.wait_volume("vol-off", attached_healthy)
        assert images_of(await sandbox.engine_of("vol-off")) == (new, new)
        replicas = await sandbox.replicas_of("vol-off")
        assert all(images_of(r) == (new, new) for r in replicas)
        # the same replicas (their data) came through the upgrade
        assert sorted(r["spec"]["dataDirectoryName"] for r in replicas) == data
        await detach(sandbox, "vol-off")


# --- SC-04 ---------------------------------------------------------------------------------------


async def test_sc04_live_upgrade_and_back(sandbox: Sandbox) -> None:
    """SC-04 mirrors test_engine_live_upgrade."""
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await attached_volume(sandbox, "vol-live", replicas=2)
    for old, new in ((DEFAULT_IMAGE, UPGRADE_IMAGE), (UPGRADE_IMAGE, DEFAULT_IMAGE)):
        await live_upgrade(sandbox, "vol-live", new, count=2)
        await wait_ref_count(sandbox, old, 0)
        await wait_ref_count(sandbox, new, 2 + 2)
    await detach(sandbox, "vol-live")
    replicas = await sandbox.replicas_of("vol-live")
    assert len(replicas) == 2 and all(r["spec"]["image"] == DEFAULT_IMAGE for r in replicas)
    await sandbox.patch("volumes", "vol-live", {"spec": {"nodeID": "node-1"}})
    await sandbox.wait_volume("vol-live", attached_healthy)
    assert all(images_of(r) == (DEFAULT_IMAGE, DEFAULT_IMAGE) for r in await sandbox.replicas_of("vol-live"))


# --- SC-05 ---------------------------------------------------------------------------------------


async def test_sc05_non_working_image_rollback_and_offline_switch(sandbox: Sandbox) -> None:
    """SC-05 mirrors test_engine_live_upgrade_rollback."""
    await deployed_engine_image(sandbox, WRONG_IMAGE)
    await attached_volume(sandbox, "vol-rb", replicas=2)
    live_seconds = sandbox.simulator.config.live_upgrade_seconds

    await sandbox.patch("volumes", "vol-rb", {"spec": {"image": WRONG_IMAGE}})

    async def stuck() -> bool:
        volume = await sandbox.get("volumes", "vol-rb")
        return images_of(volume) == (WRONG_IMAGE, DEFAULT_IMAGE) and attached_healthy(volume)

    # never completes: several times the time a working live upgrade takes
    await sandbox.stays(stuck, 4 * live_seconds, what="live upgrade to the non-working image stays pending")

    await sandbox.patch("volumes", "vol-rb", {"spec": {"image": DEFAULT_IMAGE}})

    async def rolled_back() -> bool:
        volume = await sandbox.get("volumes", "vol-rb")
        engine = await sandbox.engine_of("vol-rb")
        replicas = await sandbox.replicas_of("vol-rb")
        return (
            images_of(volume) == (DEFAULT_IMAGE, DEFAULT_IMAGE)
            and attached_healthy(volume)
            and images_of(engine) == (DEFAULT_IMAGE, DEFAULT_IMAGE)
            and len(replicas) == 2
            and await replicas_rw(sandbox, "vol-rb", 2)
        )

    await sandbox.wait_for(
        rolled_back, what="rollback complete", invariant=healthy_while_upgrading(sandbox, "vol-rb")
    )

    await sandbox.patch("volumes", "vol-rb", {"spec": {"image": WRONG_IMAGE}})
    await sandbox.stays(stuck, 2 * live_seconds, what="pending again")
    await detach(sandbox, "vol-rb")
    volume = await sandbox.wait_volume("vol-rb", lambda v: images_of(v) == (WRONG_IMAGE, WRONG_IMAGE))
    assert detached(volume)
    assert (await sandbox.engine_of("vol-rb"))["spec"]["image"] == WRONG_IMAGE
    replicas = await sandbox.replicas_of("vol-rb")
    assert len(replicas) == 2 and all(r["spec"]["image"] == WRONG_IMAGE for r in replicas)

    await sandbox.patch("volumes", "vol-rb", {"spec": {"image": DEFAULT_IMAGE}})
    await sandbox.wait_volume("vol-rb", lambda v: images_of(v) == (DEFAULT_IMAGE, DEFAULT_IMAGE))
    await sandbox.patch("volumes", "vol-rb", {"spec": {"nodeID": "node-1"}})
    await sandbox.wait_volume("vol-rb", attached_healthy)

    async def all_default_rw() -> bool:
        replicas = await sandbox.replicas_of("vol-rb")
        return all(images_of(r) == (DEFAULT_IMAGE, DEFAULT_IMAGE) for r in replicas) and await replicas_rw(
            sandbox, "vol-rb", 2
        )

    await sandbox.wait_for(all_default_rw, what="all on the original image, RW")


# --- SC-06 ---------------------------------------------------------------------------------------


async def test_sc06_live_upgrade_then_reattach_is_healthy(sandbox: Sandbox) -> None:
    """SC-06 mirrors test_engine_live_upgrade_with_intensive_data_writing (the data side is SIM-IO's)."""
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await attached_volume(sandbox, "vol-io", replicas=3)
    await live_upgrade(sandbox, "vol-io", UPGRADE_IMAGE, count=3)
    await wait_ref_count(sandbox, DEFAULT_IMAGE, 0)
    await wait_ref_count(sandbox, UPGRADE_IMAGE, 2 + 3)
    await detach(sandbox, "vol-io")
    replicas = await sandbox.replicas_of("vol-io")
    assert len(replicas) == 3 and all(r["spec"]["image"] == UPGRADE_IMAGE for r in replicas)
    async with sandbox.recording("volumes", "vol-io") as seen:
        await sandbox.patch("volumes", "vol-io", {"spec": {"nodeID": "node-2"}})
        await sandbox.wait_recorded(seen, attached_healthy)
    robustness = {v["status"].get("robustness") for v in seen if v["status"].get("state") == "attached"}
    assert robustness == {"healthy"}, "after reattach the volume is healthy, never degraded"


# --- SC-07 ---------------------------------------------------------------------------------------


async def test_sc07_engine_crash_during_live_upgrade(sandbox: Sandbox) -> None:
    """SC-07 mirrors test_engine_crash_during_live_upgrade."""
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await attached_volume(sandbox, "vol-crash", replicas=3)
    async with sandbox.recording("volumes", "vol-crash") as seen:
        await sandbox.patch("volumes", "vol-crash", {"spec": {"image": UPGRADE_IMAGE}})
        sandbox.simulator.faults.crash_engine("vol-crash")
        volume = await sandbox.wait_recorded(
            seen,
            lambda v: attached_healthy(v) and images_of(v) == (UPGRADE_IMAGE, UPGRADE_IMAGE),
            what="reattached on the new image",
        )
    states = [v["status"].get("state") for v in seen]
    assert "detached" in states, f"the crash detaches the volume first: {states}"
    first_detached = states.index("detached")
    switched = [v for v in seen[: first_detached + 1] if v["status"].get("currentImage") == UPGRADE_IMAGE]
    assert not switched or seen[first_detached]["status"]["currentImage"] == UPGRADE_IMAGE
    assert volume["status"].get("remountRequestedAt"), "the workload is told to remount (pod recreated)"
    await wait_ref_count(sandbox, DEFAULT_IMAGE, 0)
    await wait_ref_count(sandbox, UPGRADE_IMAGE, 5)
    replicas = await sandbox.replicas_of("vol-crash")
    assert len(replicas) == 3 and all(images_of(r) == (UPGRADE_IMAGE, UPGRADE_IMAGE) for r in replicas)


# --- SC-08 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("sandbox_config", [fast_config(rebuild_seconds=2.0)])
async def test_sc08_rebuild_limit_does_not_block_live_upgrade(sandbox: Sandbox) -> None:
    """SC-08 mirrors test_engine_live_upgrade_while_replica_concurrent_rebuild."""
    await sandbox.set_setting("concurrent-replica-rebuild-per-node-limit", "1")
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await attached_volume(sandbox, "vol-1", replicas=3)
    await attached_volume(sandbox, "vol-2", replicas=3)
    victim = next(r for r in await sandbox.replicas_of("vol-1") if r["spec"]["nodeID"] == "node-1")
    await sandbox.delete("replicas", victim["metadata"]["name"])

    async def rebuilding() -> bool:
        status = (await sandbox.engine_of("vol-1")).get("status", {}).get("rebuildStatus") or {}
        return any(s.get("state") == "in_progress" for s in status.values())

    await sandbox.wait_for(rebuilding, what="vol-1 rebuild in progress")
    await live_upgrade(sandbox, "vol-2", UPGRADE_IMAGE, count=3)
    assert await rebuilding(), "vol-2's live upgrade finished while vol-1 was still rebuilding"
    await sandbox.wait_volume("vol-1", attached_healthy, within=10, what="vol-1 rebuilt")
    vol1_replicas = await sandbox.replicas_of("vol-1")
    assert len(vol1_replicas) == 3
    await wait_ref_count(sandbox, DEFAULT_IMAGE, 2 + len(vol1_replicas))
    await wait_ref_count(sandbox, UPGRADE_IMAGE, 2 + 3)


# --- SC-09 ---------------------------------------------------------------------------------------


async def test_sc09_rebuild_after_upgrade_uses_the_new_image(sandbox: Sandbox) -> None:
    """SC-09 mirrors e2e Test Replica Rebuilding After Engine Upgrade."""
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await attached_volume(sandbox, "vol-reb", replicas=3)
    await live_upgrade(sandbox, "vol-reb", UPGRADE_IMAGE, count=3)
    victim = next(r for r in await sandbox.replicas_of("vol-reb") if r["spec"]["nodeID"] == "node-1")
    await sandbox.delete("replicas", victim["metadata"]["name"])
    await sandbox.wait_volume("vol-reb", lambda v: v["status"].get("robustness") == "degraded")
    await sandbox.wait_volume("vol-reb", attached_healthy, what="rebuilt")
    replicas = await sandbox.replicas_of("vol-reb")
    rebuilt = [r for r in replicas if r["spec"]["nodeID"] == "node-1"]
    assert len(replicas) == 3 and len(rebuilt) == 1
    assert rebuilt[0]["metadata"]["name"] != victim["metadata"]["name"]
    assert images_of(rebuilt[0]) == (UPGRADE_IMAGE, UPGRADE_IMAGE)


async def test_sc09_upgrade_completes_with_extra_replicas(sandbox: Sandbox) -> None:
    """SC-09 mirrors e2e Test Engine Upgrade With Extra Replicas."""
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await attached_volume(sandbox, "vol-extra", replicas=3)
    await sandbox.patch("volumes", "vol-extra", {"spec": {"numberOfReplicas": 2}})
    await sandbox.patch("volumes", "vol-extra", {"spec": {"image": UPGRADE_IMAGE}})
    await sandbox.wait_volume(
        "vol-extra", lambda v: images_of(v) == (UPGRADE_IMAGE, UPGRADE_IMAGE), what="upgrade completed"
    )
