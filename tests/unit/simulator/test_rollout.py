"""What a Longhorn rollout does to the data plane in the reconcile core (SIM-VER, SIM-IM start delay):
running instances stay in the old instance managers, new v1 instances wait for the new default
one, and an engine image missing on a node holds a live upgrade back (the volume controller's gate,
reached here without the webhooks that would refuse such a request at the API)."""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.config import ImageProfile, SimConfig
from tests.unit.simulator.world import World

NS = "longhorn-system"
DEFAULT = "longhornio/longhorn-engine:v1.10.0"
NEW = "longhornio/longhorn-engine:v1.11.0"
PARTIAL = "longhornio/longhorn-engine:v1.10.0-partial"
NEW_IM = "longhornio/longhorn-instance-manager:v1.11.0"
DEFAULT_IM = "longhornio/longhorn-instance-manager:v1.10.0"


def quiet(world: World) -> None:
    """Rounds until nothing more is written, without letting simulated time pass."""
    for _ in range(200):
        if not world.round().writes:
            return
    raise AssertionError("no quiet round")


def managers(world: World, image: str) -> list[dict[str, Any]]:
    return [im for im in world.view.all("instancemanager") if im["spec"]["image"] == image]


def replicas_of(world: World, volume: str) -> list[dict[str, Any]]:
    return [r for r in world.view.all("replica") if r["spec"]["volumeName"] == volume]


def rolled_out(config: SimConfig) -> World:
    """A settled world with one attached volume, then the settings of a new release (what roll_out
    writes), with time held still so the new instance managers are still starting."""
    world = World(config=config)
    world.put("volume", objects.volume("vol-up", NS, image=DEFAULT, replicas=2, node_id="node-1"))
    world.put("volume", objects.volume("vol-new", NS, image=DEFAULT, replicas=2))
    world.settle()
    world.patch("setting", "default-engine-image", {"value": NEW})
    world.patch("setting", "default-instance-manager-image", {"value": NEW_IM})
    world.put("engineimage", objects.engine_image(NEW, NS))
    quiet(world)
    return world


def test_new_v1_instances_wait_for_the_new_default_instance_manager() -> None:
    world = rolled_out(SimConfig(im_startup_seconds=5.0, engine_image_deploy_seconds=0.0))
    new_ims = managers(world, NEW_IM)
    assert len(new_ims) == 3 and all(im["status"]["currentState"] == "starting" for im in new_ims)
    up = world.get("volume", "vol-up")
    assert (up["status"]["state"], up["status"]["robustness"]) == ("attached", "healthy")
    assert all(r["status"]["currentState"] == "running" for r in replicas_of(world, "vol-up"))

    world.patch("volume", "vol-new", {"spec": {"nodeID": "node-2"}})
    world.patch("volume", "vol-up", {"spec": {"image": NEW}})
    quiet(world)
    assert world.get("volume", "vol-new")["status"]["state"] == "attaching", "no IM to start in yet"
    twins = [r for r in replicas_of(world, "vol-up") if r["spec"]["active"] is False]
    assert twins and all(r.get("status", {}).get("currentState") != "running" for r in twins)
    assert world.get("volume", "vol-up")["status"]["currentImage"] == DEFAULT

    world.settle()
    assert world.get("volume", "vol-new")["status"]["state"] == "attached"
    up = world.get("volume", "vol-up")
    assert up["status"]["currentImage"] == NEW and up["status"]["robustness"] == "healthy"
    started_in = {r["status"]["instanceManagerName"] for r in replicas_of(world, "vol-up")}
    assert started_in <= {im["metadata"]["name"] for im in managers(world, NEW_IM)}
    engine = world.get("engine", objects.engine_name("vol-up"))
    assert engine["status"]["instanceManagerName"] in {
        im["metadata"]["name"] for im in managers(world, DEFAULT_IM)
    }


def test_old_instance_managers_go_once_nothing_runs_in_them() -> None:
    world = rolled_out(SimConfig(im_startup_seconds=0.5))
    world.settle()
    busy = {r["spec"]["nodeID"] for r in replicas_of(world, "vol-up")} | {"node-1"}
    old = managers(world, DEFAULT_IM)
    assert {im["spec"]["nodeID"] for im in old} == busy, "kept where vol-up's processes run, gone elsewhere"
    assert len(busy) < 3
    world.patch("volume", "vol-up", {"spec": {"nodeID": ""}})
    world.settle()
    assert managers(world, DEFAULT_IM) == []


def test_an_image_missing_on_a_replica_node_holds_the_live_upgrade_back() -> None:
    config = SimConfig(images={PARTIAL: ImageProfile(undeployed_nodes=frozenset({"node-3"}))})
    world = World(config=config)
    world.put("engineimage", objects.engine_image(PARTIAL, NS))
    world.put("volume", objects.volume("vol", NS, image=DEFAULT, replicas=3, node_id="node-1"))
    world.settle()
    world.patch("volume", "vol", {"spec": {"image": PARTIAL}})
    world.settle()
    volume = world.get("volume", "vol")
    assert volume["status"]["currentImage"] == DEFAULT and volume["status"]["robustness"] == "healthy"
    assert len(replicas_of(world, "vol")) == 3, "not even the new replicas are made"
