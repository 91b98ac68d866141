"""Longhorn's manual engine-upgrade rules (manager/volume.go EngineUpgrade) as the sandbox's manager
API applies them: each rule in Longhorn's order, with Longhorn's message and HTTP status — and the
volume webhook, which does not apply them."""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.admission import LonghornWebhooks
from corral_sandbox.simulator.engine_upgrade_api import EngineUpgradeRules, Refusal
from corral_sandbox.simulator.manager_api import ClusterSnapshot

NS = "longhorn-system"
DEFAULT = "longhornio/longhorn-engine:v1.10.0"
COMPAT = "longhornio/longhorn-engine:v1.10.0-upgrade"
THIRD = "longhornio/longhorn-engine:v1.10.0-third"
PARTIAL = "longhornio/longhorn-engine:v1.10.0-partial"  # not on node-3
IM_IMAGE = "longhornio/longhorn-instance-manager:v1.10.0"
NODES = ("node-1", "node-2", "node-3")
ONLY_DEFAULT = (
    "Only allow to upgrade to the default engine image {default} because the setting "
    "`Concurrent Automatic Engine Upgrade Per Node Limit` is greater than 0"
)


def engine_image(image: str, missing: tuple[str, ...] = ()) -> dict[str, Any]:
    ei = objects.engine_image(image, NS)
    ei["status"] = {
        "state": "deploying" if missing else "deployed",
        "incompatible": False,
        "nodeDeploymentMap": {n: n not in missing for n in NODES},
    }
    return ei


def volume(
    *,
    spec_image: str = DEFAULT,
    current: str = DEFAULT,
    node: str = "node-1",
    robustness: str = "healthy",
    **spec: Any,
) -> dict[str, Any]:
    obj = objects.volume("vol", NS, image=spec_image, node_id=node)
    obj["spec"].update(spec)
    obj["status"] = {
        "state": "attached" if node else "detached",
        "currentNodeID": node,
        "robustness": robustness if node else "unknown",
        "currentImage": current,
        "currentMigrationNodeID": "",
    }
    return obj


def cluster(
    vol: dict[str, Any] | None,
    *,
    limit: str = "0",
    replica_nodes: tuple[str, ...] = NODES,
    images: tuple[dict[str, Any], ...] | None = None,
) -> ClusterSnapshot:
    settings = [
        {"metadata": {"name": "default-engine-image"}, "value": DEFAULT},
        {"metadata": {"name": "concurrent-automatic-engine-upgrade-per-node-limit"}, "value": limit},
    ]
    replicas = (
        [
            objects.replica(vol, NS, name=f"vol-r-{i}", node_id=n, image=vol["status"]["currentImage"])
            for i, n in enumerate(replica_nodes)
        ]
        if vol
        else []
    )
    default_images = (
        engine_image(DEFAULT),
        engine_image(COMPAT),
        engine_image(THIRD),
        engine_image(PARTIAL, ("node-3",)),
    )
    return ClusterSnapshot(
        {
            "settings": settings,
            "engineimages": list(default_images if images is None else images),
            "nodes": [objects.longhorn_node(n, NS) for n in NODES],
            "volumes": [vol] if vol else [],
            "replicas": replicas,
        }
    )


def ask(vol: dict[str, Any] | None, image: str, **options: Any) -> Refusal | None:
    """The manager's answer to `POST /v1/volumes/vol?action=engineUpgrade {"image": image}`."""
    return EngineUpgradeRules(cluster(vol, **options), NS).refusal("vol", image)


def refused(answer: Refusal | None, image: str, reason: str, status: int = 500) -> bool:
    expected = Refusal(status, f"cannot upgrade engine for volume vol using image {image}: {reason}")
    assert answer == expected
    return True


def test_an_ordinary_request_is_accepted() -> None:
    assert ask(volume(), COMPAT) is None
    assert ask(volume(spec_image=COMPAT, current=COMPAT), DEFAULT) is None


def test_limit_above_zero_allows_only_the_default_image() -> None:
    assert refused(
        ask(volume(), COMPAT, limit="3"),
        COMPAT,
        f"upgrading to {COMPAT} is not allowed. " + ONLY_DEFAULT.format(default=DEFAULT),
    )
    assert ask(volume(spec_image=COMPAT, current=COMPAT), DEFAULT, limit="3") is None


def test_the_limit_is_judged_before_the_volume_is_looked_up() -> None:
    """Rule 1 reads only settings: a missing volume gets the limit's answer, else a 404."""
    assert refused(
        ask(None, COMPAT, limit="1"),
        COMPAT,
        f"upgrading to {COMPAT} is not allowed. " + ONLY_DEFAULT.format(default=DEFAULT),
    )
    assert refused(ask(None, COMPAT), COMPAT, 'volume.longhorn.io "vol" not found', status=404)


def test_a_limit_that_is_not_an_integer_is_an_error() -> None:
    assert refused(
        ask(volume(), COMPAT, limit="many"), COMPAT, 'strconv.ParseInt: parsing "many": invalid syntax'
    )


def test_a_v2_volume_is_refused_even_for_the_default_image() -> None:
    v2 = volume(dataEngine="v2", spec_image=IM_IMAGE, current=IM_IMAGE)
    for limit in ("0", "3"):
        assert refused(
            ask(v2, DEFAULT, limit=limit),
            DEFAULT,
            f"cannot upgrade engine for volume vol using image {DEFAULT} because the volume is using data "
            "engine v2",
        )


def test_during_an_upgrade_only_a_rollback_is_accepted() -> None:
    in_flight = volume(spec_image=COMPAT, current=DEFAULT)
    assert refused(
        ask(in_flight, THIRD),
        THIRD,
        f"upgrading in process for volume vol engine image from {DEFAULT} to {COMPAT}, "
        "cannot upgrade to another engine image",
    )
    assert ask(in_flight, DEFAULT) is None, "a rollback to currentImage"
    # the limit comes first: a rollback to a non-default image is refused while it is above 0
    backwards = volume(spec_image=DEFAULT, current=COMPAT)
    answer = ask(backwards, COMPAT, limit="1")
    assert answer is not None and ONLY_DEFAULT.format(default=DEFAULT) in answer.message


def test_asking_again_for_the_image_in_flight_is_refused() -> None:
    in_flight = volume(spec_image=COMPAT, current=DEFAULT)
    assert refused(
        ask(in_flight, COMPAT),
        COMPAT,
        f"upgrading in process for volume vol engine image from {DEFAULT} to {COMPAT} already",
    )
    assert refused(
        ask(volume(), DEFAULT),
        DEFAULT,
        f"upgrading in process for volume vol engine image from {DEFAULT} to {DEFAULT} already",
    ), "a settled volume asked for its own image: Longhorn's words, though nothing is in process"


def test_the_target_must_be_deployed_on_every_replica_node_and_the_attached_node() -> None:
    """T1.10 case 3: refused for a volume with a replica where the image is missing, allowed elsewhere."""
    reason = (
        f"cannot upgrade engine image for volume vol from image {DEFAULT} to image {PARTIAL} because the "
        f"engine image {PARTIAL} is not deployed on the replicas' nodes or the node that the volume is "
        "attached to"
    )
    assert refused(ask(volume(), PARTIAL), PARTIAL, reason)
    assert refused(ask(volume(node="node-3"), PARTIAL, replica_nodes=("node-1",)), PARTIAL, reason)
    assert ask(volume(), PARTIAL, replica_nodes=("node-1", "node-2")) is None
    assert ask(volume(node=""), PARTIAL, replica_nodes=("node-1", "node-2")) is None, "offline too"
    no_nodes = ask(volume(node=""), COMPAT, replica_nodes=())
    assert no_nodes is not None and "is not deployed on the replicas' nodes" in no_nodes.message


def test_a_target_without_an_engine_image_is_an_error_not_a_404() -> None:
    """Longhorn formats the lookup error with %v, so the not-found cause no longer shows: 500."""
    missing = "longhornio/longhorn-engine:nowhere"
    answer = ask(volume(), missing)
    ei = objects.engine_image_name(missing)
    assert refused(
        answer,
        missing,
        f"cannot upgrade engine image for volume vol from image {DEFAULT} to image {missing}: failed to get "
        f'engine image {missing}: engineimage.longhorn.io "{ei}" not found',
    )


def test_the_current_image_must_be_deployed_there_too() -> None:
    on_partial = volume(spec_image=PARTIAL, current=PARTIAL)
    assert refused(
        ask(on_partial, DEFAULT),
        DEFAULT,
        f"cannot upgrade engine image for volume vol from image {PARTIAL} to image {DEFAULT} because the "
        f"volume's current engine image {PARTIAL} is not deployed on the replicas' nodes or the node that "
        "the volume is attached to",
    )


def test_an_image_in_another_state_is_not_ready() -> None:
    stuck = engine_image(COMPAT)
    stuck["status"]["state"] = "error"
    answer = ask(volume(), COMPAT, images=(engine_image(DEFAULT), stuck))
    assert answer is not None and f"because the engine image {COMPAT} is not deployed" in answer.message


@pytest.mark.parametrize(
    ("vol", "reason"),
    [
        (volume(migrationNodeID="node-2"), "cannot upgrade during migration"),
        (volume(robustness="degraded"), "cannot do live upgrade for a unhealthy volume vol"),
        (
            volume(dataLocality="strict-local"),
            "cannot do live upgrade for an attached strict-local volume vol",
        ),
    ],
)
def test_live_upgrade_refusals(vol: dict[str, Any], reason: str) -> None:
    assert refused(ask(vol, COMPAT), COMPAT, reason)


def test_a_detached_strict_local_volume_may_be_upgraded_offline() -> None:
    assert ask(volume(node="", dataLocality="strict-local"), COMPAT) is None


def test_a_dr_volume_may_be_upgraded_by_hand() -> None:
    assert ask(volume(standby=True), COMPAT) is None


# --- the webhook is not where these rules live ---------------------------------------------------


def webhook_answer(old: dict[str, Any], new: dict[str, Any], *, limit: str = "3") -> str | None:
    return LonghornWebhooks(cluster(old, limit=limit), NS).volume("UPDATE", old, new)


def with_image(vol: dict[str, Any], image: str) -> dict[str, Any]:
    return {**vol, "spec": {**vol["spec"], "image": image}}


def test_the_volume_webhook_accepts_what_only_the_manager_api_refuses() -> None:
    """longhorn-behaviour.md §1.5: a direct `spec.image` update meets only the webhook (the image
    exists and is compatible), so a controller's — or corral's — write is never judged by the API's
    rules, and ordinary writers of a volume in flight are not refused."""
    settled = volume()
    assert webhook_answer(settled, with_image(settled, COMPAT)) is None, "rule 1 is not the webhook's"
    assert webhook_answer(settled, with_image(settled, PARTIAL), limit="0") is None, "nor rule 5"
    in_flight = volume(spec_image=COMPAT, current=DEFAULT)
    assert webhook_answer(in_flight, with_image(in_flight, THIRD), limit="0") is None, "nor rule 4"
    assert webhook_answer(in_flight, in_flight) is None, "a no-op update of a volume in flight"
    relabelled = {**in_flight, "metadata": {**in_flight["metadata"], "labels": {"team": "a"}}}
    assert webhook_answer(in_flight, relabelled) is None
    v2 = volume(dataEngine="v2", spec_image=IM_IMAGE, current=IM_IMAGE)
    assert webhook_answer(v2, with_image(v2, "longhornio/longhorn-instance-manager:v1.11.0")) is None
    assert "cannot find engine image" in (webhook_answer(settled, with_image(settled, "img:none")) or "")
