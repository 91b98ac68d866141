"""The simulator's reconcile core on its own: observed objects in, writes out, no I/O."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.config import ImageProfile, SimConfig
from corral_sandbox.simulator.context import Memory, ReconcileContext
from corral_sandbox.simulator.view import ClusterView
from tests.unit.simulator.world import World

DEFAULT = "longhornio/longhorn-engine:v1.10.0"
NEW = "longhornio/longhorn-engine:v1.10.0-upgrade"
WRONG = "longhornio/longhorn-engine:v1.10.0-wrong"


def grown(config: SimConfig | None = None, *volumes: tuple[str, int, str]) -> World:
    """A settled 3-node world with the given (name, replicas, attached node) volumes."""
    world = World(config=config)
    for image in (NEW, WRONG):
        world.put("engineimage", objects.engine_image(image, "longhorn-system"))
    for name, replicas, node in volumes:
        world.put(
            "volume", objects.volume(name, "longhorn-system", image=DEFAULT, replicas=replicas, node_id=node)
        )
    world.settle()
    return world


def replicas_of(world: World, volume: str) -> list[dict[str, Any]]:
    return [r for r in world.view.all("replica") if r["spec"]["volumeName"] == volume]


def test_a_seeded_world_grows_engines_replicas_and_instance_managers() -> None:
    world = grown(None, ("vol-a", 3, "node-1"), ("vol-b", 2, ""))
    assert world.get("volume", "vol-a")["status"]["state"] == "attached"
    assert world.get("volume", "vol-a")["status"]["robustness"] == "healthy"
    assert world.get("volume", "vol-b")["status"]["state"] == "detached"
    assert {r["spec"]["nodeID"] for r in replicas_of(world, "vol-a")} == {"node-1", "node-2", "node-3"}
    managers = world.view.all("instancemanager")
    assert len(managers) == 3 and all(im["status"]["currentState"] == "running" for im in managers)
    default_ei = world.get("engineimage", objects.engine_image_name(DEFAULT))
    assert default_ei["status"]["refCount"] == (2 + 3) + (2 + 2)
    assert default_ei["status"]["state"] == "deployed"
    unused = world.get("engineimage", objects.engine_image_name(NEW))
    assert unused["status"]["refCount"] == 0 and unused["status"]["noRefSince"]


def test_offline_upgrade_reimages_engine_and_replicas_then_reports_current_image() -> None:
    world = grown(None, ("vol", 2, ""))
    world.patch("volume", "vol", {"spec": {"image": NEW}})
    world.settle()
    assert world.get("volume", "vol")["status"]["currentImage"] == NEW
    assert world.get("engine", "vol-e-0")["spec"]["image"] == NEW
    assert all(
        r["spec"]["image"] == NEW and r["status"]["currentImage"] == "" for r in replicas_of(world, "vol")
    )


def test_live_upgrade_swaps_replicas_and_keeps_the_count() -> None:
    world = grown(None, ("vol", 3, "node-1"))
    before = {r["metadata"]["name"] for r in replicas_of(world, "vol")}
    world.patch("volume", "vol", {"spec": {"image": NEW}})
    world.settle()
    volume = world.get("volume", "vol")
    assert volume["status"]["currentImage"] == NEW and volume["status"]["robustness"] == "healthy"
    after = replicas_of(world, "vol")
    assert len(after) == 3 and before.isdisjoint(r["metadata"]["name"] for r in after)
    assert all(r["status"]["currentImage"] == NEW and r["spec"]["active"] for r in after)


def test_a_non_working_image_never_completes_and_rollback_cleans_up() -> None:
    config = SimConfig(non_working_images=frozenset({WRONG}))
    world = grown(config, ("vol", 2, "node-1"))
    world.patch("volume", "vol", {"spec": {"image": WRONG}})
    world.settle(horizon=3600)
    assert world.get("volume", "vol")["status"]["currentImage"] == DEFAULT
    assert len(replicas_of(world, "vol")) == 4, "the new replicas wait beside the old ones"
    world.patch("volume", "vol", {"spec": {"image": DEFAULT}})
    world.settle()
    assert len(replicas_of(world, "vol")) == 2
    assert world.get("engine", "vol-e-0")["spec"]["image"] == DEFAULT


def test_a_bad_image_stalls_the_live_upgrades_of_some_volumes_only() -> None:
    config = SimConfig(images={NEW: ImageProfile(stalls_on=frozenset({"bad"}))})
    world = grown(config, ("bad", 2, "node-1"), ("good", 2, "node-2"), ("offline", 2, ""))
    for name in ("bad", "good", "offline"):
        world.patch("volume", name, {"spec": {"image": NEW}})
    world.settle(horizon=3600)
    assert world.get("volume", "bad")["status"]["currentImage"] == DEFAULT  # stalled, for ever
    assert world.get("volume", "good")["status"]["currentImage"] == NEW
    assert world.get("volume", "offline")["status"]["currentImage"] == NEW  # offline re-images
    # a share picks volumes by a hash of the names: the same ones every time, about that many
    share = ImageProfile(stall_share=0.3)
    picked = [n for n in (f"vol-{i}" for i in range(1000)) if share.stalls(n, NEW)]
    assert 250 <= len(picked) <= 350 and picked == [
        n for n in (f"vol-{i}" for i in range(1000)) if share.stalls(n, NEW)
    ]
    assert not ImageProfile().stalls("vol-1", NEW) and ImageProfile(working=False).stalls("vol-1", NEW)


def test_same_git_commit_delays_the_live_upgrade_until_detach() -> None:
    config = SimConfig(
        images={NEW: ImageProfile(git_commit="same"), DEFAULT: ImageProfile(git_commit="same")}
    )
    world = grown(config, ("vol", 2, "node-1"))
    world.patch("volume", "vol", {"spec": {"image": NEW}})
    world.settle()
    assert world.get("volume", "vol")["status"]["currentImage"] == DEFAULT
    assert len(replicas_of(world, "vol")) == 2, "no live-upgrade replicas are even created"
    world.patch("volume", "vol", {"spec": {"nodeID": ""}})
    world.settle()
    assert world.get("volume", "vol")["status"]["currentImage"] == NEW


def test_incompatible_cli_is_flagged_and_state_left_alone() -> None:
    config = SimConfig(images={NEW: ImageProfile(cli_api_version=7, cli_api_min_version=7)})
    world = grown(config)
    status = world.get("engineimage", objects.engine_image_name(NEW))["status"]
    assert status["incompatible"] is True and status["state"] == "deploying"
    assert "nodeDeploymentMap" not in status


def test_rebuilds_on_one_node_wait_for_a_slot() -> None:
    world = grown(SimConfig(rebuild_seconds=5.0), ("vol-a", 3, "node-1"), ("vol-b", 3, "node-1"))
    world.patch("setting", "concurrent-replica-rebuild-per-node-limit", {"value": "1"})
    for volume in ("vol-a", "vol-b"):
        victim = next(r for r in replicas_of(world, volume) if r["spec"]["nodeID"] == "node-3")
        world.delete("replica", victim["metadata"]["name"])
        world.patch("replica", victim["metadata"]["name"], {"metadata": {"finalizers": []}})
    for _ in range(20):
        world.round()
        world.now += 0.1
        modes = [
            mode
            for volume in ("vol-a", "vol-b")
            for mode in world.get("engine", f"{volume}-e-0")["status"].get("replicaModeMap", {}).values()
        ]
        assert modes.count("WO") <= 1, "the per-node rebuild limit of 1 holds"
    world.settle()
    assert all(world.get("volume", v)["status"]["robustness"] == "healthy" for v in ("vol-a", "vol-b"))


def test_timers_nobody_asks_about_are_forgotten() -> None:
    memory = Memory(timers={"stale": 0.0})
    ctx = ReconcileContext(ClusterView.empty(), memory, SimConfig(), 5.0, "", __import__("random").Random(0))
    assert ctx.waited("fresh", 1.0) is False
    ctx.forget_untouched_timers()
    assert memory.timers == {"fresh": 5.0}
    assert ctx.next_deadline() == 6.0


def test_same_seed_same_writes() -> None:
    def run() -> list[Any]:
        world = grown(replace(SimConfig(), seed=3), ("vol", 3, "node-2"))
        world.patch("volume", "vol", {"spec": {"image": NEW}})
        world.settle()
        return [w.record() for w in world.log]

    assert run() == run()


def test_the_im_controller_keeps_conditions_it_does_not_own() -> None:
    """corral's im-restart writes SettingSynced; the simulated IM controller must not drop it, or
    the two would rewrite the conditions list in turn forever."""
    world = grown(None)
    im = world.view.all("instancemanager")[0]
    name = im["metadata"]["name"]
    synced = {"type": "SettingSynced", "status": "True", "reason": "", "message": ""}
    world.patch("instancemanager", name, {"status": {"conditions": [*im["status"]["conditions"], synced]}})
    writes = len(world.log)
    world.settle()
    conditions = world.get("instancemanager", name)["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["PodReady", "NodeReady", "SettingSynced"]
    assert not [w for w in world.log[writes:] if w.kind == "instancemanager" and w.name == name]
