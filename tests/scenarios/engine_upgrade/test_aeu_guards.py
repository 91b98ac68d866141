"""AEU-16, the manual engine-upgrade guards (acceptance-scenarios.md §1.3; T1.9 step 6, T1.10 case 3),
with corral's engine-upgrade service running beside the operator.

The guards are Longhorn's (manager/volume.go EngineUpgrade, longhorn-behaviour.md §1.5), and like
Longhorn the sandbox has them in longhorn-manager's REST API, not in the admission webhook: the
operator asks `POST /v1/volumes/{name}?action=engineUpgrade` and gets Longhorn's answer (status and
message, word for word). corral's actuator writes `spec.image` through the Kubernetes API and meets
only the webhook; the scenario checks on LH_RESULTS that none of corral's commands was refused.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from corral_bus import Bus
from corral_model import codec
from corral_model.envelopes import CommandResult, Outcome
from corral_model.subjects import RESULTS_STREAM
from corral_sandbox.simulator import ImageProfile, SimConfig
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, WRONG_IMAGE, Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer

pytestmark = pytest.mark.scenario

COMPAT = UPGRADE_IMAGE
PARTIAL = "longhornio/longhorn-engine:v1.10.0-partial"  # never deployed on node-3
ONLY_DEFAULT = (
    "upgrading to {image} is not allowed. Only allow to upgrade to the default engine image "
    f"{DEFAULT_IMAGE} because the setting `Concurrent Automatic Engine Upgrade Per Node Limit` is "
    "greater than 0"
)


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(
        live_upgrade_seconds=2.0,
        non_working_images=frozenset({WRONG_IMAGE}),
        images={PARTIAL: ImageProfile(undeployed_nodes=frozenset({"node-3"}))},
    )


# --- the operator's side ---------------------------------------------------------------------------


async def ask(sandbox: Sandbox, name: str, image: str) -> str | None:
    """An operator's manual engine upgrade through longhorn-manager's REST API: None when accepted
    (the volume comes back asking for `image`), else the manager's error message (always a 500)."""
    answer = await sandbox.engine_upgrade(name, image)
    if answer.status == 200:
        assert (answer.body["name"], answer.body["image"]) == (name, image), answer.body
        return None
    assert (answer.status, answer.body.get("type")) == (500, "error"), answer
    return answer.message


def refusal(name: str, image: str, reason: str) -> str:
    return f"cannot upgrade engine for volume {name} using image {image}: {reason}"


async def volume_on(
    sandbox: Sandbox, name: str, *, image: str, node: str, replicas: int, **fields: Any
) -> None:
    await sandbox.create(
        "volumes",
        lh_objects.volume(name, sandbox.namespace, image=image, node_id=node, replicas=replicas, **fields),
    )
    await sandbox.wait_volume(
        name,
        lambda v: (
            v.get("status", {}).get("state") == "attached" and v["status"].get("robustness") == "healthy"
        ),
        within=20,
        what=f"{name} attached and healthy",
    )


async def engine_images(sandbox: Sandbox) -> None:
    for image in (COMPAT, WRONG_IMAGE, PARTIAL):
        await sandbox.create_engine_image(image)

    async def ready() -> bool:
        maps = {
            image: (await sandbox.engine_image(image)).get("status", {}).get("nodeDeploymentMap") or {}
            for image in (COMPAT, WRONG_IMAGE, PARTIAL)
        }
        everywhere = {"node-1": True, "node-2": True, "node-3": True}
        return maps[COMPAT] == maps[WRONG_IMAGE] == everywhere and maps[PARTIAL] == {
            **everywhere,
            "node-3": False,
        }

    await sandbox.wait_for(ready, within=20, what="engine images deployed (PARTIAL not on node-3)")


def images(volume: dict[str, Any]) -> tuple[str, str]:
    return volume["spec"].get("image", ""), volume.get("status", {}).get("currentImage", "")


# --- corral's side ---------------------------------------------------------------------------------


async def engine_upgrade_results(bus: Bus) -> list[CommandResult]:
    """Every result the actuator published for engine-upgrade commands (LH_RESULTS, from the start),
    but for the volume Events the service reports: only the volume patches."""
    info = await bus.js.stream_info(RESULTS_STREAM)
    total = info.state.messages
    found: list[CommandResult] = []
    if not total:
        return found
    psub = await bus.js.pull_subscribe(
        "lh.res.engine-upgrade.volume.>",
        stream=RESULTS_STREAM,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=5.0),
    )
    try:
        read = 0
        while read < total:
            try:
                batch = await psub.fetch(min(500, total - read), timeout=1)
            except TimeoutError:
                break  # fewer engine-upgrade results than messages in the stream
            for message in batch:
                found.append(codec.decode(message.data, CommandResult))
                await message.ack()
            read += len(batch)
    finally:
        with contextlib.suppress(Exception):
            await psub.unsubscribe()
    return found


# --- the scenario ----------------------------------------------------------------------------------


async def test_aeu_16_manual_upgrade_guards(sandbox: Sandbox, bus: Bus, stack: list[Running]) -> None:
    await engine_images(sandbox)
    await volume_on(sandbox, "vol-w", image=DEFAULT_IMAGE, node="node-1", replicas=2)
    await volume_on(sandbox, "vol-p3", image=DEFAULT_IMAGE, node="node-1", replicas=3)  # a replica on node-3
    await volume_on(sandbox, "vol-dr", image=COMPAT, node="node-2", replicas=2, standby=True)
    await sandbox.patch("nodes", "node-3", {"spec": {"allowScheduling": False}})
    await volume_on(sandbox, "vol-p2", image=DEFAULT_IMAGE, node="node-2", replicas=2)  # node-1 and node-2
    await volume_on(sandbox, "vol-a3", image=DEFAULT_IMAGE, node="node-3", replicas=2)  # attached on node-3
    await sandbox.patch("nodes", "node-3", {"spec": {"allowScheduling": True}})
    for name in ("vol-p2", "vol-a3"):
        assert {r["spec"]["nodeID"] for r in await sandbox.replicas_of(name)} == {"node-1", "node-2"}

    # --- limit 0: the operator upgrades by hand ---
    # T1.10 case 3: the target must be deployed on every replica node and the attached node
    for name in ("vol-p3", "vol-a3"):
        assert await ask(sandbox, name, PARTIAL) == refusal(
            name,
            PARTIAL,
            f"cannot upgrade engine image for volume {name} from image {DEFAULT_IMAGE} to image {PARTIAL} "
            f"because the engine image {PARTIAL} is not deployed on the replicas' nodes or the node that "
            "the volume is attached to",
        )
    assert await ask(sandbox, "vol-p2", PARTIAL) is None
    await sandbox.wait_volume(
        "vol-p2", lambda v: images(v) == (PARTIAL, PARTIAL), within=20, what="vol-p2 live"
    )

    # an upgrade that never completes (a non-working image) keeps vol-w in flight
    assert await ask(sandbox, "vol-w", WRONG_IMAGE) is None
    in_flight = await sandbox.get("volumes", "vol-w")
    assert images(in_flight) == (WRONG_IMAGE, DEFAULT_IMAGE)
    assert await ask(sandbox, "vol-w", WRONG_IMAGE) == refusal(
        "vol-w",
        WRONG_IMAGE,
        f"upgrading in process for volume vol-w engine image from {DEFAULT_IMAGE} to {WRONG_IMAGE} already",
    )
    assert await ask(sandbox, "vol-w", COMPAT) == refusal(
        "vol-w",
        COMPAT,
        f"upgrading in process for volume vol-w engine image from {DEFAULT_IMAGE} to {WRONG_IMAGE}, "
        "cannot upgrade to another engine image",
    )

    # --- limit 3: only the default image may be asked for; corral upgrades what it may ---
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "3")
    for name, image in (("vol-p3", COMPAT), ("vol-w", COMPAT)):
        assert await ask(sandbox, name, image) == refusal(name, image, ONLY_DEFAULT.format(image=image))
    # the rollback to currentImage (the default here) is accepted
    assert await ask(sandbox, "vol-w", DEFAULT_IMAGE) is None
    # T1.9 step 6: a manual upgrade to the default works while auto-upgrade is on (a DR volume,
    # which corral leaves alone); asking again while it runs is refused
    assert await ask(sandbox, "vol-dr", DEFAULT_IMAGE) is None
    running = await sandbox.get("volumes", "vol-dr")
    assert images(running) == (DEFAULT_IMAGE, COMPAT), "the live upgrade outlasted the request"
    assert await ask(sandbox, "vol-dr", DEFAULT_IMAGE) == refusal(
        "vol-dr",
        DEFAULT_IMAGE,
        f"upgrading in process for volume vol-dr engine image from {COMPAT} to {DEFAULT_IMAGE} already",
    )

    async def all_on_default() -> bool:
        volumes = {v["metadata"]["name"]: v for v in await observer.volumes()}
        return all(images(v) == (DEFAULT_IMAGE, DEFAULT_IMAGE) for v in volumes.values())

    await sandbox.wait_for(
        all_on_default,
        within=30,
        interval=0.05,
        what="every volume on the default image (vol-p2 by corral)",
        invariant=observer.limit_holds(3),
    )
    for name in ("vol-w", "vol-dr", "vol-p2"):
        volume = await sandbox.get("volumes", name)
        assert volume["status"]["robustness"] == "healthy", volume["status"]
        assert len(await sandbox.replicas_of(name)) == 2

    # corral's commands (spec.image through the Kubernetes API: the webhook only) were never refused
    async def corral_applied_vol_p2() -> list[CommandResult] | None:
        results = await engine_upgrade_results(bus)
        applied = [r for r in results if r.target.name == "vol-p2" and r.outcome is Outcome.APPLIED]
        return results if applied else None

    results = await sandbox.wait_for(
        corral_applied_vol_p2, within=10, what="corral's upgrade of vol-p2 applied"
    )
    refused = [r for r in results if "denied the request" in r.detail or r.outcome is Outcome.ERROR]
    assert not refused, f"corral's commands refused: {refused}"
    assert {r.target.name for r in results} == {"vol-p2"}, "corral touched only the volume it may upgrade"
