"""Longhorn's manual engine-upgrade rules (manager/volume.go EngineUpgrade) as the sandbox's volume
webhook applies them: each rule in Longhorn's order, with Longhorn's refusal text."""

from __future__ import annotations

from typing import Any

import pytest

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.admission import LonghornWebhooks
from tests.unit.simulator.test_rules import FakeCluster

NS = "longhorn-system"
DEFAULT = "longhornio/longhorn-engine:v1.10.0"
COMPAT = "longhornio/longhorn-engine:v1.10.0-upgrade"
THIRD = "longhornio/longhorn-engine:v1.10.0-third"
PARTIAL = "longhornio/longhorn-engine:v1.10.0-partial"  # not on node-3
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


def hooks(vol: dict[str, Any], *, limit: int = 0, replica_nodes: tuple[str, ...] = NODES) -> LonghornWebhooks:
    settings = [
        {"metadata": {"name": "default-engine-image"}, "value": DEFAULT},
        {"metadata": {"name": "concurrent-automatic-engine-upgrade-per-node-limit"}, "value": str(limit)},
    ]
    replicas = [
        objects.replica(vol, NS, name=f"vol-r-{i}", node_id=n, image=vol["status"]["currentImage"])
        for i, n in enumerate(replica_nodes)
    ]
    cluster = FakeCluster(
        settings=settings,
        engineimages=[
            engine_image(DEFAULT),
            engine_image(COMPAT),
            engine_image(THIRD),
            engine_image(PARTIAL, ("node-3",)),
        ],
        nodes=[objects.longhorn_node(n, NS) for n in NODES],
        volumes=[vol],
        replicas=replicas,
    )
    return LonghornWebhooks(cluster, NS)


def ask(vol: dict[str, Any], image: str, **options: Any) -> str | None:
    """The webhook's answer to an update that sets `spec.image` to `image` (a manual request)."""
    wanted = {**vol, "spec": {**vol["spec"], "image": image}}
    return hooks(vol, **options).volume("UPDATE", vol, wanted)


def refused(answer: str | None, image: str, reason: str) -> bool:
    return answer == f"cannot upgrade engine for volume vol using image {image}: {reason}"


def test_limit_above_zero_allows_only_the_default_image() -> None:
    assert refused(
        ask(volume(), COMPAT, limit=3),
        COMPAT,
        f"upgrading to {COMPAT} is not allowed. " + ONLY_DEFAULT.format(default=DEFAULT),
    )
    on_compat = volume(spec_image=COMPAT, current=COMPAT)
    assert ask(on_compat, DEFAULT, limit=3) is None
    assert ask(volume(), COMPAT, limit=0) is None


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
    assert ONLY_DEFAULT.format(default=DEFAULT) in (ask(backwards, COMPAT, limit=1) or "")


def test_asking_again_for_the_image_in_flight_is_refused() -> None:
    """Through the Kubernetes API a re-request is an update that changes nothing."""
    in_flight = volume(spec_image=COMPAT, current=DEFAULT)
    answer = hooks(in_flight).volume("UPDATE", in_flight, in_flight)
    assert refused(
        answer, COMPAT, f"upgrading in process for volume vol engine image from {DEFAULT} to {COMPAT} already"
    )
    settled = volume()
    assert hooks(settled).volume("UPDATE", settled, settled) is None, (
        "a no-op update of a settled volume passes"
    )


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
    assert no_nodes is not None and "is not deployed on the replicas' nodes" in no_nodes


def test_the_current_image_must_be_deployed_there_too() -> None:
    on_partial = volume(spec_image=PARTIAL, current=PARTIAL)
    answer = ask(on_partial, DEFAULT)
    assert refused(
        answer,
        DEFAULT,
        f"cannot upgrade engine image for volume vol from image {PARTIAL} to image {DEFAULT} because the "
        f"volume's current engine image {PARTIAL} is not deployed on the replicas' nodes or the node that "
        "the volume is attached to",
    )


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


def test_a_detached_strict_local_or_unhealthy_volume_may_be_upgraded_offline() -> None:
    assert ask(volume(node="", dataLocality="strict-local"), COMPAT) is None


def test_v2_volumes_and_unchanged_images_are_not_judged() -> None:
    v2 = volume(dataEngine="v2", spec_image="longhornio/longhorn-instance-manager:v1.10.0")
    assert ask(v2, "longhornio/longhorn-instance-manager:v1.11.0", limit=3) is None
    plain = volume()
    other = {**plain, "spec": {**plain["spec"], "numberOfReplicas": 2}}
    assert hooks(plain, limit=3).volume("UPDATE", plain, other) is None
