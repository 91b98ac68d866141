"""Property test of the reconcile core: any sequence of operator actions and faults on a small cluster
settles into the state the specs ask for, with reference counts that match the objects — also when the
API server refuses a share of the controllers' writes while the script runs."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.config import SimConfig
from tests.unit.simulator.world import World

IMAGES = ["longhornio/longhorn-engine:v1.10.0", "longhornio/longhorn-engine:v1.10.0-upgrade"]
NODES = ["node-1", "node-2", "node-3"]
VOLUMES = ["vol-a", "vol-b", "vol-c"]

action = st.one_of(
    st.tuples(st.just("attach"), st.sampled_from(VOLUMES), st.sampled_from(["", *NODES])),
    st.tuples(st.just("image"), st.sampled_from(VOLUMES), st.sampled_from(IMAGES)),
    st.tuples(st.just("replicas"), st.sampled_from(VOLUMES), st.integers(1, 4)),
    st.tuples(st.just("fail"), st.sampled_from(VOLUMES), st.integers(0, 3)),
    st.tuples(st.just("crash"), st.sampled_from(VOLUMES), st.just(0)),
    st.tuples(st.just("tick"), st.sampled_from(VOLUMES), st.integers(1, 5)),
    st.tuples(st.just("delete-replica"), st.sampled_from(VOLUMES), st.integers(0, 3)),
    st.tuples(st.just("expand"), st.sampled_from(VOLUMES), st.integers(1, 3)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, max_size=12))
def test_any_script_settles_into_what_the_specs_ask(script: list[tuple[str, str, object]]) -> None:
    settles_into_what_the_specs_ask(script)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, max_size=12), st.integers(0, 2**32 - 1))
def test_any_script_losing_writes_settles_into_what_the_specs_ask(
    script: list[tuple[str, str, object]], lose_seed: int
) -> None:
    """A third of the controllers' writes refused while the script runs (none after): every controller
    redoes what is missing, so the end state is the same, and no volume ever holds more than twice the
    replicas it asks for (Longhorn's own bound: a live upgrade's new replicas beside the old ones)."""
    settles_into_what_the_specs_ask(script, lose_rate=0.3, lose_seed=lose_seed)


def settles_into_what_the_specs_ask(
    script: list[tuple[str, str, object]], *, lose_rate: float = 0.0, lose_seed: int = 0
) -> None:
    world = World(config=SimConfig(seed=1), lose_seed=lose_seed)
    world.put("engineimage", objects.engine_image(IMAGES[1], "longhorn-system"))
    for name in VOLUMES:
        world.put("volume", objects.volume(name, "longhorn-system", image=IMAGES[0], replicas=2))
    world.settle()
    world.lose_rate = lose_rate
    most = dict.fromkeys(VOLUMES, 2)
    for verb, volume, arg in script:
        if verb == "attach":
            world.patch("volume", volume, {"spec": {"nodeID": arg}})
        elif verb == "image":
            world.patch("volume", volume, {"spec": {"image": arg}})
        elif verb == "replicas":
            world.patch("volume", volume, {"spec": {"numberOfReplicas": arg}})
        elif verb == "fail":
            replicas = [r for r in world.view.all("replica") if r["spec"]["volumeName"] == volume]
            if replicas:
                world.memory.fail_replicas.add(replicas[int(str(arg)) % len(replicas)]["metadata"]["name"])
        elif verb == "crash":
            world.memory.crash_engines.add(f"{volume}-e-0")
        elif verb == "delete-replica":
            replicas = [r for r in world.view.all("replica") if r["spec"]["volumeName"] == volume]
            if replicas:
                world.delete("replica", replicas[int(str(arg)) % len(replicas)]["metadata"]["name"])
        elif verb == "expand":
            size = int(world.get("volume", volume)["spec"]["size"]) + int(str(arg)) * 2**30
            world.patch("volume", volume, {"spec": {"size": str(size)}})
        for _ in range(int(str(arg)) if verb == "tick" else 1):
            world.round()
            world.now += 0.05
            for name in VOLUMES:
                # extra healthy replicas are kept when the count is lowered: the most ever asked for
                wanted = most[name] = max(
                    most[name], int(world.get("volume", name)["spec"]["numberOfReplicas"])
                )
                # a failed replica waits out staleReplicaTimeout beside the rest: not counted
                live = [
                    r
                    for r in replicas_of(world, name)
                    if not r["metadata"].get("deletionTimestamp") and not r["spec"].get("failedAt")
                ]
                assert len(live) <= 2 * wanted, f"{name}: {len(live)} live replicas, at most {wanted} wanted"
    world.lose_rate = 0.0
    world.settle(horizon=600)

    for name in VOLUMES:
        observed = world.get("volume", name)
        vspec, vstatus = observed["spec"], observed["status"]
        replicas = replicas_of(world, name)
        # an attached volume that cannot place all its replicas is degraded and never starts a live
        # upgrade (Longhorn's rule); every other volume finishes the one it was asked for
        degraded = bool(vspec["nodeID"]) and vspec["numberOfReplicas"] > len(NODES)
        if not degraded:
            assert vstatus["currentImage"] == vspec["image"], f"{name} finished its upgrade"
        assert all(r["spec"].get("active", True) for r in replicas), "no live-upgrade replica is left over"
        assert all(r["spec"]["image"] == vstatus["currentImage"] for r in replicas)
        assert not any(r["spec"].get("failedAt") for r in replicas), "failed replicas were cleaned up"
        assert not vstatus["expansionRequired"]
        assert world.get("engine", f"{name}-e-0")["status"]["currentSize"] == vspec["size"]
        placed = [r for r in replicas if r["spec"]["nodeID"]]
        assert len(placed) >= min(vspec["numberOfReplicas"], len(NODES))
        assert len({r["spec"]["nodeID"] for r in placed}) == len(placed), "one replica per node"
        if vspec["nodeID"]:
            assert vstatus["state"] == "attached" and vstatus["currentNodeID"] == vspec["nodeID"]
            wanted = vspec["numberOfReplicas"]
            assert vstatus["robustness"] == ("healthy" if wanted <= len(NODES) else "degraded")
            assert vstatus["ownerID"] == vspec["nodeID"]
        else:
            assert vstatus["state"] == "detached"
            assert all(r["status"].get("currentImage", "") == "" for r in replicas)

    references: Counter[str] = Counter()
    for kind in ("volume", "engine", "replica"):
        for obj in world.view.all(kind):
            for image in {obj["spec"].get("image", ""), obj.get("status", {}).get("currentImage", "")} - {""}:
                references[image] += 1
    for image in IMAGES:
        ei = world.get("engineimage", objects.engine_image_name(image))
        assert ei["status"]["refCount"] == references[image]
        assert bool(ei["status"]["noRefSince"]) == (references[image] == 0)


def replicas_of(world: World, volume: str) -> list[dict[str, Any]]:
    return [r for r in world.view.all("replica") if r["spec"]["volumeName"] == volume]
