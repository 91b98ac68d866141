"""Property test of the v2 data plane (SIM-V2/SIM-IO): any script of target moves, node upgrades
requested and released, v2 IMs deleted or killed, replicas failed — also with a third of the
controllers' writes refused while it runs — settles, once the faults are gone and the targets
cleared, into attached volumes served from their own node: no engine left suspended or pointing
elsewhere, every volume healthy and serving, no I/O gap left open; and a switch-over never moves the
frontend (the engine's node) at any round of the script.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corral_sandbox.seeds.v2 import v2_seed
from corral_sandbox.simulator import SimConfig, objects
from corral_sandbox.simulator.io_ledger import io_report
from tests.unit.simulator.world import World

NS = "longhorn-system"
NODES = ["node-1", "node-2", "node-3"]
VOLUMES = ["v2-vol-001", "v2-vol-002"]
NEW = "longhornio/longhorn-instance-manager:v1.11.0"
STATES = ["", "switching-over", "upgrading-instance-manager", "rebuilding-replica", "completed"]

action = st.one_of(
    st.tuples(st.just("target"), st.sampled_from(VOLUMES), st.sampled_from(["", *NODES])),
    st.tuples(st.just("upgrade"), st.sampled_from(NODES), st.sampled_from(STATES)),
    st.tuples(st.just("delete-im"), st.sampled_from(NODES), st.just("")),
    st.tuples(st.just("kill-im"), st.sampled_from(NODES), st.just("")),
    st.tuples(st.just("block"), st.sampled_from(NODES), st.just("")),
    st.tuples(st.just("fail"), st.sampled_from(VOLUMES), st.sampled_from(NODES)),
    st.tuples(st.just("tick"), st.sampled_from(VOLUMES), st.sampled_from(["1", "3"])),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, max_size=10))
def test_any_v2_script_settles_into_volumes_served_from_home(script: list[tuple[str, str, str]]) -> None:
    settles_home(script)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, max_size=10), st.integers(0, 2**32 - 1))
def test_any_v2_script_losing_writes_settles_into_volumes_served_from_home(
    script: list[tuple[str, str, str]], lose_seed: int
) -> None:
    settles_home(script, lose_rate=0.3, lose_seed=lose_seed)


def _upgrade_name(node: str) -> str:
    return f"mgr-{node}-0000abcd"


def settles_home(script: list[tuple[str, str, str]], *, lose_rate: float = 0.0, lose_seed: int = 0) -> None:
    seed = v2_seed(nodes=3, volumes=2, replicas=2, attached_to=("node-1", "node-2"))
    world = World(
        seed=seed, config=SimConfig(seed=seed.seed, images=seed.image_profiles), lose_seed=lose_seed
    )
    world.settle()
    home = {v: world.get("volume", v)["spec"]["nodeID"] for v in VOLUMES}
    world.patch("setting", "default-instance-manager-image", {"value": NEW})
    world.settle()
    world.lose_rate = lose_rate

    def frontend_fixed() -> None:
        for volume in VOLUMES:
            assert world.get("engine", objects.engine_name(volume))["spec"]["nodeID"] in ("", home[volume])

    for verb, subject, arg in script:
        if verb == "target":
            world.patch("volume", subject, {"spec": {"targetNodeIDForLiveUpgrade": arg, "image": NEW}})
        elif verb == "upgrade":
            if world.view.get("nodedataengineupgrade", _upgrade_name(subject)) is None:
                body = objects.node_data_engine_upgrade(_upgrade_name(subject), NS, node=subject, image=NEW)
                world.put("nodedataengineupgrade", body)
            world.patch("nodedataengineupgrade", _upgrade_name(subject), {"status": {"state": arg}})
        elif verb == "delete-im":
            for im in world.view.all("instancemanager"):
                if im["spec"]["nodeID"] == subject and im["spec"]["dataEngine"] == "v2":
                    world.delete("instancemanager", im["metadata"]["name"])
        elif verb == "kill-im":
            world.memory.v2_im_down.add(subject)
        elif verb == "block":
            world.memory.blocked_targets.add(subject)
        elif verb == "fail":
            for replica in world.view.all("replica"):
                if replica["spec"]["volumeName"] == subject and replica["spec"]["nodeID"] == arg:
                    world.memory.fail_replicas.add(replica["metadata"]["name"])
        for _ in range(int(arg) if verb == "tick" else 1):
            world.round()
            frontend_fixed()
            world.now += 0.05

    # faults gone, every upgrade finished, targets cleared: what the decider leaves behind
    world.lose_rate = 0.0
    world.memory.v2_im_down.clear()
    world.memory.blocked_targets.clear()
    for upgrade in world.view.all("nodedataengineupgrade"):
        world.patch("nodedataengineupgrade", upgrade["metadata"]["name"], {"status": {"state": "completed"}})
    for volume in VOLUMES:
        world.patch("volume", volume, {"spec": {"targetNodeIDForLiveUpgrade": ""}})
    world.settle(horizon=60.0)
    report: dict[str, Any] = io_report(world.memory, world.now)["volumes"]
    for volume in VOLUMES:
        vol = world.get("volume", volume)
        engine = world.get("engine", objects.engine_name(volume))
        assert vol["status"]["state"] == "attached" and vol["status"]["currentNodeID"] == home[volume]
        assert vol["status"]["robustness"] == "healthy", vol["status"]
        assert vol["status"].get("currentTargetNodeIDForLiveUpgrade", "") == ""
        assert engine["spec"]["desireState"] == "running" and engine["status"]["currentState"] == "running"
        assert engine["status"].get("currentTargetNodeIDForLiveUpgrade", "") == ""
        assert report[volume]["serving"] is True
        assert all(gap["end"] is not None for gap in report[volume]["gaps"])
