"""longhorn-manager's REST API in the sandbox (manager_api.py), over real HTTP: a manual engine
upgrade is judged by the manager's rules, written through the Kubernetes API (so the volume webhook
still applies), and answered as longhorn-manager answers — the volume, or a go-rancher error resource
with its status. A direct `spec.image` update meets only the webhook, as in Longhorn."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from corral_sandbox.simulator import ImageProfile, ManagerVersions, SimConfig
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, WRONG_IMAGE, Sandbox, fast_config

OLD_CLI = "longhornio/longhorn-engine:v1.10.0-oldcli"  # CLI API 8 only: incompatible once the manager needs 9
IM_IMAGE = "longhornio/longhorn-instance-manager:v1.10.0"
LIMIT = "concurrent-automatic-engine-upgrade-per-node-limit"


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(
        non_working_images=frozenset({WRONG_IMAGE}),
        images={OLD_CLI: ImageProfile(cli_api_version=8, cli_api_min_version=8)},
    )


def wrapped(name: str, image: str, reason: str) -> str:
    return f"cannot upgrade engine for volume {name} using image {image}: {reason}"


async def attached(sandbox: Sandbox, name: str, **fields: Any) -> None:
    await sandbox.create(
        "volumes", lh_objects.volume(name, sandbox.namespace, replicas=2, node_id="node-1", **fields)
    )
    await sandbox.wait_volume(
        name,
        lambda v: (
            v.get("status", {}).get("state") == "attached" and v["status"].get("robustness") == "healthy"
        ),
        what=f"{name} attached and healthy",
    )


async def deployed(sandbox: Sandbox, image: str) -> None:
    await sandbox.create_engine_image(image)

    async def ready() -> bool:
        return bool((await sandbox.engine_image(image)).get("status", {}).get("state") == "deployed")

    await sandbox.wait_for(ready, what=f"{image} deployed")


async def test_an_accepted_upgrade_sets_spec_image_and_answers_with_the_volume(sandbox: Sandbox) -> None:
    await deployed(sandbox, UPGRADE_IMAGE)
    await attached(sandbox, "vol-a", image=DEFAULT_IMAGE)
    answer = await sandbox.engine_upgrade("vol-a", UPGRADE_IMAGE)
    assert answer.status == 200, answer
    body = answer.body
    assert (body["type"], body["id"], body["name"]) == ("volume", "vol-a", "vol-a")
    assert (body["image"], body["currentImage"]) == (UPGRADE_IMAGE, DEFAULT_IMAGE)
    assert body["links"]["self"] == f"{sandbox.manager_url}/v1/volumes/vol-a"
    assert "engineUpgrade" in body["actions"]
    assert sorted(r["hostId"] for r in body["replicas"]) == ["node-1", "node-2"]
    assert (await sandbox.get("volumes", "vol-a"))["spec"]["image"] == UPGRADE_IMAGE
    await sandbox.wait_volume(
        "vol-a", lambda v: v["status"].get("currentImage") == UPGRADE_IMAGE, what="the live upgrade done"
    )
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{sandbox.manager_url}/v1/volumes/vol-a") as got,
    ):
        assert got.status == 200
        assert (await got.json())["currentImage"] == UPGRADE_IMAGE


async def test_a_refusal_is_longhorns_error_resource(sandbox: Sandbox) -> None:
    await deployed(sandbox, UPGRADE_IMAGE)
    await attached(sandbox, "vol-r", image=DEFAULT_IMAGE)
    await sandbox.set_setting(LIMIT, "2")
    answer = await sandbox.engine_upgrade("vol-r", UPGRADE_IMAGE)
    assert answer.status == 500
    assert answer.body == {
        "type": "error",
        "links": {"self": f"{sandbox.manager_url}/v1/volumes/vol-r?action=engineUpgrade"},
        "actions": {},
        "status": 500,
        "code": "Internal Server Error",
        "message": wrapped(
            "vol-r",
            UPGRADE_IMAGE,
            f"upgrading to {UPGRADE_IMAGE} is not allowed. Only allow to upgrade to the default engine "
            f"image {DEFAULT_IMAGE} because the setting `Concurrent Automatic Engine Upgrade Per Node "
            "Limit` is greater than 0",
        ),
        "detail": "",
    }
    assert (await sandbox.get("volumes", "vol-r"))["spec"]["image"] == DEFAULT_IMAGE, "nothing written"
    await sandbox.set_setting(LIMIT, "0")
    missing = await sandbox.engine_upgrade("nope", UPGRADE_IMAGE)
    assert (missing.status, missing.body["code"]) == (404, "Not Found")
    assert missing.message == wrapped("nope", UPGRADE_IMAGE, 'volume.longhorn.io "nope" not found')

    base = f"{sandbox.manager_url}/v1/volumes/vol-r"
    async with aiohttp.ClientSession() as session:
        async with session.post(base, params={"action": "engineUpgrade"}, data=b"{not json") as bad:
            assert bad.status == 500
            assert (await bad.json())["message"].startswith("failed to read engineUpgradeInput: ")
        async with session.post(base, params={"action": "noSuchAction"}, json={}) as unknown:
            assert (unknown.status, await unknown.text()) == (404, "404 page not found\n")
        async with session.get(f"{sandbox.manager_url}/v1/volumes/nope") as absent:
            assert absent.status == 404


async def owner_of(sandbox: Sandbox, volume: str) -> str:
    return str(((await sandbox.get("volumes", volume)).get("status") or {}).get("ownerID") or "")


async def test_a_v2_volume_is_refused_by_the_api_and_left_alone_by_the_webhook(sandbox: Sandbox) -> None:
    await sandbox.create(
        "volumes",
        lh_objects.volume("vol-v2", sandbox.namespace, image=IM_IMAGE, replicas=1, data_engine="v2"),
    )
    answer = await sandbox.engine_upgrade("vol-v2", DEFAULT_IMAGE)
    assert answer.status == 500
    assert answer.message == wrapped(
        "vol-v2",
        DEFAULT_IMAGE,
        f"cannot upgrade engine for volume vol-v2 using image {DEFAULT_IMAGE} because the volume is using "
        "data engine v2",
    )
    assert (await sandbox.get("volumes", "vol-v2"))["spec"]["image"] == IM_IMAGE
    # the v2 data-engine upgrade moves spec.image through the Kubernetes API: no webhook rule for v2
    # but the owner's (§5.3 reads the owner node of a v2 image change), so once the volume has one
    await sandbox.wait_for(
        lambda: owner_of(sandbox, "vol-v2"), what="vol-v2 owned by a node (status.ownerID)"
    )
    moved = await sandbox.patch("volumes", "vol-v2", {"spec": {"image": IM_IMAGE + "-next"}})
    assert moved["spec"]["image"] == IM_IMAGE + "-next"


async def test_the_webhook_still_applies_to_the_apis_write(sandbox: Sandbox) -> None:
    """An image that passes the manager's rules (deployed everywhere) but turned incompatible: the
    update the API sends is denied by the webhook, and the API wraps that denial in its answer."""
    await deployed(sandbox, OLD_CLI)
    await attached(sandbox, "vol-w", image=DEFAULT_IMAGE)
    sandbox.simulator.reconfigure(manager=ManagerVersions(cli_api_min_version=9))

    async def incompatible() -> bool:
        return bool((await sandbox.engine_image(OLD_CLI)).get("status", {}).get("incompatible"))

    await sandbox.wait_for(incompatible, what=f"{OLD_CLI} incompatible")
    answer = await sandbox.engine_upgrade("vol-w", OLD_CLI)
    assert answer.status == 500
    assert answer.message == wrapped(
        "vol-w",
        OLD_CLI,
        'admission webhook "validator.longhorn.io" denied the request: '
        f"engine image {OLD_CLI} is incompatible",
    )


async def test_ordinary_writers_of_a_volume_in_flight_are_not_refused(sandbox: Sandbox) -> None:
    """Only the API answers "already in process": through the Kubernetes API an update of a volume
    whose upgrade is under way — a label, a no-op — passes, as in Longhorn."""
    await deployed(sandbox, WRONG_IMAGE)  # deploys, but a live upgrade to it never completes
    await deployed(sandbox, UPGRADE_IMAGE)
    await attached(sandbox, "vol-f", image=DEFAULT_IMAGE)
    assert (await sandbox.engine_upgrade("vol-f", WRONG_IMAGE)).status == 200
    again = await sandbox.engine_upgrade("vol-f", WRONG_IMAGE)
    assert again.message == wrapped(
        "vol-f",
        WRONG_IMAGE,
        f"upgrading in process for volume vol-f engine image from {DEFAULT_IMAGE} to {WRONG_IMAGE} already",
    )
    another = await sandbox.engine_upgrade("vol-f", UPGRADE_IMAGE)
    assert another.message == wrapped(
        "vol-f",
        UPGRADE_IMAGE,
        f"upgrading in process for volume vol-f engine image from {DEFAULT_IMAGE} to {WRONG_IMAGE}, "
        "cannot upgrade to another engine image",
    )
    labelled = await sandbox.patch("volumes", "vol-f", {"metadata": {"labels": {"team": "storage"}}})
    assert labelled["metadata"]["labels"]["team"] == "storage"
    same = await sandbox.patch("volumes", "vol-f", {"spec": {"image": WRONG_IMAGE}})
    assert same["spec"]["image"] == WRONG_IMAGE
    # what the API refused above, a controller may write directly: only the webhook judges it
    third = await sandbox.patch("volumes", "vol-f", {"spec": {"image": UPGRADE_IMAGE}})
    assert third["spec"]["image"] == UPGRADE_IMAGE
    # and the rollback to currentImage is accepted by the API
    rollback = await sandbox.engine_upgrade("vol-f", DEFAULT_IMAGE)
    assert (rollback.status, rollback.body["image"]) == (200, DEFAULT_IMAGE)


async def test_a_conflicting_write_is_retried_from_a_fresh_read(sandbox: Sandbox) -> None:
    """Longhorn wraps EngineUpgrade in RetryOnConflictCause: a 409 on the update re-runs the whole
    check on a fresh read, five tries in all; after that the conflict is the answer."""
    await deployed(sandbox, UPGRADE_IMAGE)
    await attached(sandbox, "vol-c", image=DEFAULT_IMAGE)
    tries = {"seen": 0, "to_refuse": 2}

    def conflict(operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
        """A validating hook answering 409 to the API's update (vol-c from the default to UPGRADE)."""
        if old is None or new is None or new["metadata"]["name"] != "vol-c":
            return None
        if (old["spec"]["image"], new["spec"]["image"]) != (DEFAULT_IMAGE, UPGRADE_IMAGE):
            return None
        tries["seen"] += 1
        if tries["seen"] > tries["to_refuse"]:
            return None
        return "the object has been modified; please apply your changes to the latest version"

    sandbox.emulator.register_admission("longhorn.io", "volumes", conflict, name="race.test", code=409)
    answer = await sandbox.engine_upgrade("vol-c", UPGRADE_IMAGE)
    assert (answer.status, answer.body["image"]) == (200, UPGRADE_IMAGE)
    assert tries["seen"] == 3, "two conflicts, then the third try went through"

    rollback = await sandbox.engine_upgrade("vol-c", DEFAULT_IMAGE)
    assert rollback.status == 200, rollback
    tries.update(seen=0, to_refuse=1000)  # now every try conflicts
    refused = await sandbox.engine_upgrade("vol-c", UPGRADE_IMAGE)
    assert (refused.status, tries["seen"]) == (500, 5)
    assert refused.message == wrapped(
        "vol-c",
        UPGRADE_IMAGE,
        'admission webhook "race.test" denied the request: the object has been modified; please apply '
        "your changes to the latest version",
    )
    assert (await sandbox.get("volumes", "vol-c"))["spec"]["image"] == DEFAULT_IMAGE
