"""SIM-V2 / SIM-IO conformance (acceptance-scenarios.md §7; longhorn-behaviour.md §5.4, §5.5 last
part): the simulated v2 data plane produces exactly the facts services/v2-upgrade/README.md's
"contract for SIM-V2" says the decider waits for, before the v2 upgrade scenarios trust it.

In-process (World, manual time): the rules round by round, the decider's writes played by hand the
way commands.py words them (volume `spec.image` / `spec.targetNodeIDForLiveUpgrade`, replica
`desireState: stopped` + `failedAt`, deletes). Through the real API and the HTTP control:
tests/integration/simulator/test_conformance_v2.py.

SC-V2-01 v2 volumes, engines and replicas in v2 IMs; SC-V2-02 the v2 IM image per node and the
nodes' pulled images; SC-V2-03 DataEngineUpgradeRequested and Schedulable; SC-V2-04 the replica
scheduler filter as intended; SC-V2-05 no replenishment for volumes owned by the upgrading node, no
rebuild while a replica sits on it; SC-V2-06 a v2 engine on an upgrading node outlives its IM;
SC-V2-07 the switch-over, step by step; SC-V2-08 replica stop, delete and rebuild; SC-V2-09
snapshots; SC-V2-10 a detached volume adopts its image on the next attach; SC-V2-11 the I/O ledger;
SC-V2-12 the stalled-target and killed-IM faults.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from corral_sandbox.seeds.v2 import v2_seed
from corral_sandbox.simulator import SimConfig, objects
from corral_sandbox.simulator.io_ledger import io_report
from corral_sandbox.simulator.node_images import node_image_names
from corral_sandbox.simulator.settings import DEFAULT_INSTANCE_MANAGER_IMAGE
from tests.unit.simulator.world import World

NS = "longhorn-system"
OLD = DEFAULT_INSTANCE_MANAGER_IMAGE
NEW = "longhornio/longhorn-instance-manager:v1.11.0"
UPGRADE = "mgr-node-1-0000abcd"


def world(config: SimConfig | None = None, **seed_args: Any) -> World:
    seed = v2_seed(**seed_args)
    built = World(seed=seed, config=config or SimConfig(seed=seed.seed, images=seed.image_profiles))
    built.settle()
    return built


def v2_ims(w: World, node: str) -> list[dict[str, Any]]:
    return [
        im
        for im in w.view.all("instancemanager")
        if im["spec"]["nodeID"] == node and im["spec"]["dataEngine"] == "v2"
    ]


def the_v2_im(w: World, node: str) -> dict[str, Any]:
    [im] = v2_ims(w, node)
    return im


def engine(w: World, volume: str) -> dict[str, Any]:
    return w.get("engine", objects.engine_name(volume))


def replicas(w: World, volume: str, node: str | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in w.view.all("replica")
        if r["spec"]["volumeName"] == volume and (node is None or r["spec"]["nodeID"] == node)
    ]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj["status"].get("conditions") or [] if c["type"] == kind), None)


def request_upgrade(w: World, node: str = "node-1", state: str = "") -> None:
    """What the v2-upgrade manager does when it starts a node: the default IM image moves on (an
    operator's Longhorn upgrade) and a NodeDataEngineUpgrade for the node exists."""
    w.patch("setting", "default-instance-manager-image", {"value": NEW})
    name = f"mgr-{node}-0000abcd"
    w.put(
        "nodedataengineupgrade", objects.node_data_engine_upgrade(name, NS, node=node, image=NEW, state=state)
    )
    w.settle()


def set_upgrade_state(w: World, state: str, node: str = "node-1", *, settle: bool = True) -> None:
    w.patch("nodedataengineupgrade", f"mgr-{node}-0000abcd", {"status": {"state": state}})
    if settle:
        w.settle()


def point_volume(w: World, volume: str, target: str, image: str | None = None) -> None:
    """commands.patch_volume: `spec.image` and/or `spec.targetNodeIDForLiveUpgrade`."""
    changes: dict[str, Any] = {"targetNodeIDForLiveUpgrade": target}
    if image is not None:
        changes["image"] = image
    w.patch("volume", volume, {"spec": changes})


def fail_replica(w: World, replica: dict[str, Any]) -> None:
    """commands.fail_replica: `desireState: stopped`, `failedAt`, `lastFailedAt`."""
    stamp = "2026-01-01T00:00:00Z"
    w.patch(
        "replica",
        replica["metadata"]["name"],
        {"spec": {"desireState": "stopped", "failedAt": stamp, "lastFailedAt": stamp}},
    )


def ledger(w: World, volume: str) -> dict[str, Any]:
    report: dict[str, Any] = io_report(w.memory, w.now)["volumes"][volume]
    return report


# --- SC-V2-01 --------------------------------------------------------------------------------------


def test_sc_v2_01_v2_volumes_engines_and_replicas_live_in_v2_instance_managers() -> None:
    w = world(nodes=3, volumes=2)
    for name in ("v2-vol-001", "v2-vol-002"):
        volume = w.get("volume", name)
        assert volume["spec"]["image"] == OLD, "a v2 volume's image is the IM image"
        assert volume["status"]["state"] == "attached" and volume["status"]["robustness"] == "healthy"
        assert volume["status"]["currentImage"] == OLD
        eng = engine(w, name)
        assert eng["status"]["instanceManagerName"] == the_v2_im(w, "node-1")["metadata"]["name"]
        assert eng["status"]["targetIP"] == the_v2_im(w, "node-1")["status"]["ip"]
        assert eng["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
        assert sorted(r["spec"]["nodeID"] for r in replicas(w, name)) == ["node-1", "node-2", "node-3"]
        for replica in replicas(w, name):
            assert replica["spec"]["image"] == "", "v2 replicas follow whatever IM runs on their node"
            assert (
                replica["status"]["instanceManagerName"]
                == (the_v2_im(w, replica["spec"]["nodeID"])["metadata"]["name"])
            )
    holding = the_v2_im(w, "node-1")["status"]
    assert sorted(holding["instanceEngines"]) == ["v2-vol-001-e-0", "v2-vol-002-e-0"]
    assert "instanceEngines" not in the_v2_im(w, "node-2")["status"], (
        "an engine is listed where its initiator runs"
    )
    assert len(the_v2_im(w, "node-2")["status"]["instanceReplicas"]) == 2


# --- SC-V2-02 --------------------------------------------------------------------------------------


def test_sc_v2_02_a_nodes_v2_im_keeps_its_image_until_deleted_then_comes_back_on_the_default() -> None:
    seed = v2_seed(nodes=4, volumes=1)
    config = SimConfig(seed=seed.seed, images=seed.image_profiles, v2_im_startup_seconds=2.0)
    w = World(seed=seed, config=config)
    w.settle()
    nodes = ["node-1", "node-2", "node-3", "node-4"]
    for node in nodes:
        assert {OLD, "longhornio/longhorn-engine:v1.10.0"} <= set(node_image_names(w.get("kubenode", node)))
    busy = sorted(r["spec"]["nodeID"] for r in replicas(w, "v2-vol-001"))
    [idle] = [n for n in nodes if n not in busy]
    replica_node = next(n for n in busy if n != "node-1")
    w.patch("setting", "default-instance-manager-image", {"value": NEW})
    w.settle()
    for node in busy:
        assert [im["spec"]["image"] for im in v2_ims(w, node)] == [OLD], "kept while busy, no second one"
    assert [im["spec"]["image"] for im in v2_ims(w, idle)] == [NEW], "an idle old one is replaced (IM-08)"
    assert NEW in node_image_names(w.get("kubenode", replica_node)), "the new v1 IM pod pulled the image"
    w.patch("kubenode", replica_node, {"status": {"images": []}})

    old = the_v2_im(w, replica_node)
    w.delete("instancemanager", old["metadata"]["name"])
    started = w.now
    w.settle(horizon=1.0)
    [new] = v2_ims(w, replica_node)
    assert new["spec"]["image"] == NEW and new["metadata"]["name"] != old["metadata"]["name"]
    assert new["status"]["currentState"] == "starting", "the v2 IM takes its start-up duration"
    w.settle()
    new = the_v2_im(w, replica_node)
    assert new["status"]["currentState"] == "running"
    assert w.now - started >= 2.0
    assert node_image_names(w.get("kubenode", replica_node)) == [NEW], "pulled again to run the pod"
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "healthy", "its lost replica rebuilt"


# --- SC-V2-03 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "state",
    [
        "",
        "initializing",
        "failing-replicas",
        "switching-over",
        "upgrading-instance-manager",
        "switching-back",
    ],
)
def test_sc_v2_03_data_engine_upgrade_requested_while_a_node_upgrade_is_in_progress(state: str) -> None:
    w = world(nodes=3, volumes=1)
    assert condition(w.get("node", "node-1"), "DataEngineUpgradeRequested") is None, "none before any upgrade"
    request_upgrade(w, state=state)
    node = w.get("node", "node-1")
    requested = condition(node, "DataEngineUpgradeRequested")
    assert requested is not None and requested["status"] == "True"
    assert requested["reason"] == "NodeDataEngineUpgradeRequested"
    assert requested["message"] == f"nodeDataeEngineUpgrade {UPGRADE} is in progress"
    schedulable = condition(node, "Schedulable")
    assert schedulable is not None and schedulable["status"] == "False"
    assert schedulable["reason"] == "NodeDataEngineUpgradeRequested"
    assert schedulable["message"] == "Data engine of node node-1 is being upgraded"
    for other in ("node-2", "node-3"):
        assert condition(w.get("node", other), "DataEngineUpgradeRequested")["status"] == "False"  # type: ignore[index]
        assert condition(w.get("node", other), "Schedulable")["status"] == "True"  # type: ignore[index]


@pytest.mark.parametrize("state", ["rebuilding-replica", "finalizing", "error", "completed"])
def test_sc_v2_03_the_condition_clears_once_the_node_upgrade_releases_the_node(state: str) -> None:
    w = world(nodes=3, volumes=1)
    request_upgrade(w)
    set_upgrade_state(w, state)
    node = w.get("node", "node-1")
    assert condition(node, "DataEngineUpgradeRequested")["status"] == "False"  # type: ignore[index]
    assert condition(node, "Schedulable")["status"] == "True"  # type: ignore[index]


# --- SC-V2-04 --------------------------------------------------------------------------------------


def test_sc_v2_04_new_v2_replicas_skip_the_upgrading_node_and_land_there_once_released() -> None:
    w = world(nodes=3, volumes=1, attached_to="node-2")
    request_upgrade(w)
    w.put("volume", objects.volume("v2-new", NS, image=OLD, replicas=3, node_id="node-3", data_engine="v2"))
    w.settle()
    placed = sorted(r["spec"]["nodeID"] for r in replicas(w, "v2-new"))
    assert placed == ["", "node-2", "node-3"], "the intended filter: not on node-1, and not nowhere"
    assert w.get("volume", "v2-new")["status"]["robustness"] == "degraded"

    set_upgrade_state(w, "rebuilding-replica")
    assert sorted(r["spec"]["nodeID"] for r in replicas(w, "v2-new")) == ["node-1", "node-2", "node-3"]
    assert w.get("volume", "v2-new")["status"]["robustness"] == "healthy"


# --- SC-V2-05 --------------------------------------------------------------------------------------


def test_sc_v2_05_a_volume_owned_by_the_upgrading_node_is_not_replenished() -> None:
    w = world(nodes=4, volumes=1, attached_to="node-1")
    request_upgrade(w)
    [on_two] = replicas(w, "v2-vol-001", "node-2")
    fail_replica(w, on_two)
    w.settle()
    live = [r for r in replicas(w, "v2-vol-001") if not r["spec"]["failedAt"]]
    assert len(live) == 2, "no replacement while its owner node is upgrading"
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "degraded"

    set_upgrade_state(w, "rebuilding-replica")
    assert len(replicas(w, "v2-vol-001")) == 3
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "healthy"


def test_sc_v2_05_no_rebuild_while_a_replica_sits_on_the_upgrading_node() -> None:
    w = world(nodes=4, volumes=1, attached_to="node-2")
    request_upgrade(w)
    [on_three] = replicas(w, "v2-vol-001", "node-3")
    fail_replica(w, on_three)
    w.settle()
    [fresh] = replicas(w, "v2-vol-001", "node-4")
    assert fresh["status"]["currentState"] == "running", "replenished on a free node"
    assert not fresh["spec"]["healthyAt"], "but not rebuilt while node-1 holds a replica of the volume"
    assert fresh["metadata"]["name"] not in (engine(w, "v2-vol-001")["status"]["replicaModeMap"] or {})

    set_upgrade_state(w, "rebuilding-replica")
    assert w.get("replica", fresh["metadata"]["name"])["spec"]["healthyAt"]
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "healthy"


# --- SC-V2-06 --------------------------------------------------------------------------------------


def test_sc_v2_06_an_engine_on_the_upgrading_node_outlives_its_im_and_moves_into_the_new_one() -> None:
    w = world(nodes=3, volumes=1)
    request_upgrade(w)
    point_volume(w, "v2-vol-001", "node-2", NEW)
    w.settle()
    old = the_v2_im(w, "node-1")
    w.delete("instancemanager", old["metadata"]["name"])
    w.round()
    w.round()
    assert engine(w, "v2-vol-001")["status"]["currentState"] == "running", "not marked error (§5.4)"
    w.settle()
    new = the_v2_im(w, "node-1")
    assert new["spec"]["image"] == NEW and new["status"]["currentState"] == "running"
    assert engine(w, "v2-vol-001")["status"]["instanceManagerName"] == new["metadata"]["name"]
    assert list(new["status"]["instanceEngines"]) == ["v2-vol-001-e-0"], "the initiator is recreated"
    assert ledger(w, "v2-vol-001")["detaches"] == 0
    assert w.get("volume", "v2-vol-001")["status"]["state"] == "attached"


def test_sc_v2_06_elsewhere_losing_the_im_is_a_crash() -> None:
    w = world(nodes=3, volumes=1)
    w.memory.v2_im_down.add("node-1")
    w.settle(horizon=0.3)
    assert ledger(w, "v2-vol-001")["crashDetaches"] == 1
    w.memory.v2_im_down.discard("node-1")
    w.settle()
    assert w.get("volume", "v2-vol-001")["status"]["state"] == "attached", "reattached as after a crash"


# --- SC-V2-07 --------------------------------------------------------------------------------------


def _observe(w: World, volume: str) -> tuple[Any, ...]:
    eng = engine(w, volume)
    vol = w.get("volume", volume)
    return (
        eng["spec"]["desireState"],
        eng["status"]["currentState"],
        bool(eng["status"].get("targetInstanceReplacementCreated")),
        eng["status"].get("currentTargetNodeIDForLiveUpgrade", ""),
        vol["status"].get("currentTargetNodeIDForLiveUpgrade", ""),
        vol["status"]["currentImage"],
    )


def _rounds_until(w: World, volume: str, done: Any, limit: int = 200) -> list[tuple[Any, ...]]:
    seen = [_observe(w, volume)]
    for _ in range(limit):
        result = w.round()
        seen.append(_observe(w, volume))
        if done(w):
            return seen
        if not result.writes and result.next_deadline is not None:
            w.now = result.next_deadline
    raise AssertionError(f"not done after {limit} rounds: {seen[-3:]}")


def test_sc_v2_07_a_switch_over_suspends_switches_and_resumes_with_the_frontend_fixed() -> None:
    w = world(nodes=3, volumes=1)
    config = w.config
    request_upgrade(w)
    started = w.now
    point_volume(w, "v2-vol-001", "node-2", NEW)
    seen = _rounds_until(
        w,
        "v2-vol-001",
        lambda w: w.get("volume", "v2-vol-001")["status"].get("currentTargetNodeIDForLiveUpgrade"),
    )
    elapsed = w.now - started
    # order: replacement created → suspended → switched → resumed → the volume reports it
    created = next(i for i, s in enumerate(seen) if s[2])
    suspended = next(i for i, s in enumerate(seen) if s[1] == "suspended")
    switched = next(i for i, s in enumerate(seen) if s[3] == "node-2")
    resumed = next(i for i, s in enumerate(seen) if i > switched and s[1] == "running")
    reported = next(i for i, s in enumerate(seen) if s[4] == "node-2")
    assert created < suspended < switched < resumed <= reported
    assert all(s[4] == "" for s in seen[:resumed]), "the volume reports the target only once it runs there"
    # manual time, no latency between rounds: exactly the configured data-plane durations
    assert elapsed == pytest.approx(config.switchover_seconds, abs=1e-9)

    volume, eng = w.get("volume", "v2-vol-001"), engine(w, "v2-vol-001")
    assert volume["spec"]["nodeID"] == volume["status"]["currentNodeID"] == "node-1", (
        "still attached to node-1"
    )
    assert volume["status"]["currentImage"] == volume["spec"]["image"] == NEW
    assert eng["spec"]["nodeID"] == "node-1", "the frontend stays on the attached node"
    assert eng["spec"]["targetNodeIDForLiveUpgrade"] == "node-2" and eng["spec"]["image"] == NEW
    assert eng["status"]["currentTargetNodeIDForLiveUpgrade"] == "node-2", "the engine CR follows the target"
    assert eng["status"]["targetIP"] == the_v2_im(w, "node-2")["status"]["ip"]
    assert eng["status"]["instanceManagerName"] == the_v2_im(w, "node-1")["metadata"]["name"]

    io = ledger(w, "v2-vol-001")
    [gap] = io["gaps"]
    assert gap["reasons"] == ["suspended"] and io["detaches"] == 0
    budget = config.v2_suspend_seconds + config.v2_switch_seconds + config.v2_resume_seconds
    assert gap["seconds"] == pytest.approx(budget, abs=1e-9)
    assert gap["seconds"] <= config.switchover_io_gap_budget


def test_sc_v2_07_clearing_the_target_switches_back_first_and_clears_the_current_target() -> None:
    w = world(nodes=3, volumes=1)
    request_upgrade(w)
    point_volume(w, "v2-vol-001", "node-2", NEW)
    w.settle()
    point_volume(w, "v2-vol-001", "node-1")  # switching-back: to the node itself
    w.settle()
    assert w.get("volume", "v2-vol-001")["status"]["currentTargetNodeIDForLiveUpgrade"] == "node-1"
    assert engine(w, "v2-vol-001")["status"]["targetIP"] == the_v2_im(w, "node-1")["status"]["ip"]
    point_volume(w, "v2-vol-001", "")
    w.settle()
    assert w.get("volume", "v2-vol-001")["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
    assert engine(w, "v2-vol-001")["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
    assert len(ledger(w, "v2-vol-001")["gaps"]) == 2, "clearing a target already home moves nothing"

    point_volume(w, "v2-vol-001", "node-3")
    w.settle()
    point_volume(w, "v2-vol-001", "")  # cleared while away (an abort): back home, then cleared
    w.settle()
    eng = engine(w, "v2-vol-001")
    assert eng["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
    assert eng["status"]["targetIP"] == the_v2_im(w, "node-1")["status"]["ip"]
    assert len(ledger(w, "v2-vol-001")["gaps"]) == 4


# --- SC-V2-08 --------------------------------------------------------------------------------------


def test_sc_v2_08_a_stopped_replica_is_deleted_and_rebuilt_once_its_node_is_schedulable() -> None:
    seed = v2_seed(nodes=3, volumes=1, attached_to="node-2")
    config = SimConfig(
        seed=seed.seed, images=seed.image_profiles, rebuild_seconds=1.0, stale_replica_seconds=60
    )
    w = World(seed=seed, config=config)
    w.settle()
    request_upgrade(w)
    [on_one] = replicas(w, "v2-vol-001", "node-1")
    fail_replica(w, on_one)
    w.settle()
    assert w.get("replica", on_one["metadata"]["name"])["status"]["currentState"] == "stopped"
    w.delete("replica", on_one["metadata"]["name"])
    w.settle()
    assert replicas(w, "v2-vol-001", "node-1") == []
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "degraded"

    set_upgrade_state(w, "rebuilding-replica", settle=False)
    started = w.now
    w.settle(horizon=0.5)
    [rebuilding] = replicas(w, "v2-vol-001", "node-1")
    assert engine(w, "v2-vol-001")["status"]["replicaModeMap"][rebuilding["metadata"]["name"]] == "WO"
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "degraded"
    w.settle()
    assert engine(w, "v2-vol-001")["status"]["replicaModeMap"][rebuilding["metadata"]["name"]] == "RW"
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "healthy"
    assert w.now - started >= 1.0


# --- SC-V2-09 --------------------------------------------------------------------------------------


def test_sc_v2_09_a_labelled_snapshot_is_ready_with_a_checksum_after_its_duration() -> None:
    seed = v2_seed(nodes=3, volumes=1)
    w = World(seed=seed, config=SimConfig(seed=seed.seed, images=seed.image_profiles, snapshot_seconds=1.5))
    w.settle()
    label = {"longhorn.io/for-data-engine-live-upgrade": UPGRADE}
    for name, volume in (("snap-1", "v2-vol-001"), ("snap-lost", "no-such-volume")):
        w.put(
            "snapshot",
            {
                "apiVersion": "longhorn.io/v1beta2",
                "kind": "Snapshot",
                "metadata": {"name": name, "namespace": NS, "labels": {**label, "longhornvolume": volume}},
                "spec": {"volume": volume, "createSnapshot": True, "labels": label},
            },
        )
    started = w.now
    w.settle(horizon=1.0)
    assert not w.get("snapshot", "snap-1").get("status", {}).get("readyToUse")
    w.settle()
    status = w.get("snapshot", "snap-1")["status"]
    assert status["readyToUse"] is True and len(status["checksum"]) == 128
    assert status["labels"] == label
    assert w.now - started >= 1.5
    lost = w.get("snapshot", "snap-lost")["status"]
    assert lost["readyToUse"] is False and "not found" in lost["error"]


# --- SC-V2-10 --------------------------------------------------------------------------------------


def test_sc_v2_10_a_detached_volume_adopts_its_image_on_the_next_attach() -> None:
    w = world(nodes=3, volumes=0, detached=1)
    w.patch("setting", "default-instance-manager-image", {"value": NEW})
    w.settle()
    w.delete("instancemanager", the_v2_im(w, "node-2")["metadata"]["name"])
    w.settle()
    w.patch("volume", "v2-detached-001", {"spec": {"image": NEW}})  # finalizing's write
    w.settle()
    w.patch("volume", "v2-detached-001", {"spec": {"nodeID": "node-2"}})
    w.settle()
    volume, eng = w.get("volume", "v2-detached-001"), engine(w, "v2-detached-001")
    assert volume["status"]["state"] == "attached" and volume["status"]["currentImage"] == NEW
    assert eng["status"]["currentImage"] == NEW
    assert eng["status"]["instanceManagerName"] == the_v2_im(w, "node-2")["metadata"]["name"]
    assert the_v2_im(w, "node-2")["spec"]["image"] == NEW


# --- SC-V2-11 --------------------------------------------------------------------------------------


def test_sc_v2_11_the_io_ledger_records_a_lost_target_and_survives_a_restart() -> None:
    w = world(nodes=3, volumes=1)
    request_upgrade(w)
    point_volume(w, "v2-vol-001", "node-2", NEW)
    w.settle()
    w.memory.v2_im_down.add("node-2")
    w.settle()
    w.now += 0.3
    w.settle()
    io = ledger(w, "v2-vol-001")
    assert io["serving"] is False and io["attached"] is True
    assert io["gaps"][-1]["end"] is None and io["gaps"][-1]["reasons"] == ["target-im-gone"]
    assert io["detaches"] == 0, "the initiator on node-1 keeps the volume attached"
    w.memory = w.memory.survivors()  # a simulator restart keeps the ledger and the fault
    assert "node-2" in w.memory.v2_im_down
    w.memory.v2_im_down.clear()
    w.settle()
    io = ledger(w, "v2-vol-001")
    assert io["serving"] is True and io["gaps"][-1]["end"] is not None
    assert io["longestGap"] == max(g["seconds"] for g in io["gaps"]) >= 0.3


def test_sc_v2_11_a_volume_never_attached_is_not_in_the_ledger_and_a_requested_detach_is_no_gap() -> None:
    w = world(nodes=3, volumes=1, detached=1)
    assert "v2-detached-001" not in io_report(w.memory, w.now)["volumes"]
    w.patch("volume", "v2-vol-001", {"spec": {"nodeID": ""}})
    w.settle()
    io = ledger(w, "v2-vol-001")
    assert io["detaches"] == 1 and io["crashDetaches"] == 0 and io["gaps"] == []


# --- SC-V2-12 --------------------------------------------------------------------------------------


def test_sc_v2_12_a_blocked_target_stalls_the_relocation_before_any_suspend() -> None:
    w = world(nodes=3, volumes=1)
    request_upgrade(w)
    w.memory.blocked_targets.add("node-2")
    point_volume(w, "v2-vol-001", "node-2", NEW)
    w.settle()
    w.now += 60.0
    w.settle()
    eng = engine(w, "v2-vol-001")
    assert eng["status"]["currentState"] == "running" and eng["spec"]["desireState"] == "running"
    assert not eng["status"].get("targetInstanceReplacementCreated")
    assert w.get("volume", "v2-vol-001")["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
    assert ledger(w, "v2-vol-001")["gaps"] == [], "a stalled relocation costs no I/O"

    point_volume(w, "v2-vol-001", "node-3")  # re-planned elsewhere (or restored): it goes through
    w.settle()
    assert w.get("volume", "v2-vol-001")["status"]["currentTargetNodeIDForLiveUpgrade"] == "node-3"


def test_sc_v2_12_a_killed_v2_im_stays_down_until_revived() -> None:
    w = world(nodes=3, volumes=1, attached_to="node-1")
    w.memory.v2_im_down.add("node-3")
    w.now += 5.0
    w.settle()
    im = the_v2_im(w, "node-3")
    assert im["status"]["currentState"] != "running"
    assert w.view.get("pod", im["metadata"]["name"]) is None, "no new pod while the fault holds"
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "degraded"
    w.memory.v2_im_down.discard("node-3")
    w.settle()
    assert the_v2_im(w, "node-3")["status"]["currentState"] == "running"
    assert w.get("volume", "v2-vol-001")["status"]["robustness"] == "healthy"


def test_sc_v2_io_gap_budget_is_the_configured_durations_plus_the_slack() -> None:
    config = replace(SimConfig(), v2_suspend_seconds=1.0, v2_switch_seconds=2.0, v2_resume_seconds=3.0)
    assert config.switchover_io_gap_budget == 6.0 + config.io_gap_slack_seconds
    assert config.switchover_seconds == config.v2_target_create_seconds + 6.0


def test_sc_v2_07_a_volume_detached_while_away_has_no_current_target_and_reattaches_home() -> None:
    w = world(nodes=3, volumes=1)
    request_upgrade(w)
    point_volume(w, "v2-vol-001", "node-2", NEW)
    w.settle()
    w.patch("volume", "v2-vol-001", {"spec": {"nodeID": "", "targetNodeIDForLiveUpgrade": ""}})
    w.settle()
    volume = w.get("volume", "v2-vol-001")
    assert volume["status"]["state"] == "detached"
    assert volume["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
    assert engine(w, "v2-vol-001")["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
    w.patch("volume", "v2-vol-001", {"spec": {"nodeID": "node-1"}})
    w.settle()
    eng = engine(w, "v2-vol-001")
    assert (
        eng["status"]["currentState"] == "running"
        and eng["status"]["currentTargetNodeIDForLiveUpgrade"] == ""
    )
    assert eng["status"]["targetIP"] == the_v2_im(w, "node-1")["status"]["ip"]


def test_sc_v2_06_a_detach_while_the_upgrading_nodes_im_is_gone_completes() -> None:
    w = world(nodes=3, volumes=1)
    assert w.get("volume", "v2-vol-001")["status"]["state"] == "attached"
    w.config = replace(w.config, v2_im_startup_seconds=60.0)  # the new IM takes a minute to come up
    request_upgrade(w)
    point_volume(w, "v2-vol-001", "node-2", NEW)
    w.settle()
    w.delete("instancemanager", the_v2_im(w, "node-1")["metadata"]["name"])
    w.settle(horizon=5.0)
    assert the_v2_im(w, "node-1")["status"]["currentState"] != "running", "the new IM still starting"
    w.patch("volume", "v2-vol-001", {"spec": {"nodeID": "", "targetNodeIDForLiveUpgrade": ""}})
    w.settle(horizon=5.0)
    assert w.get("volume", "v2-vol-001")["status"]["state"] == "detached"
    assert engine(w, "v2-vol-001")["status"]["currentState"] == "stopped"
