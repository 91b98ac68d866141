"""The v2-upgrade bench's lower bound: one node at a time, per node the steps that cannot overlap,
a step with nothing to move on a node costs nothing, and the rebuilds that must wait for
`rebuilding-replica` (the node's own volumes') in rounds of the cluster's rebuild slots."""

from __future__ import annotations

import pytest

from bench.v2_bound import DataPlaneDurations, NodeLoad, loads_of, node_steps, upgrade_bound
from bench.v2_timeline import StateTimeline

DURATIONS = DataPlaneDurations(
    replica_stop_s=0.1,
    replica_delete_s=0.05,
    target_create_s=0.04,
    suspend_s=0.02,
    switch_s=0.03,
    resume_s=0.01,
    im_restart_s=0.5,
    replica_start_s=0.04,
    rebuild_s=0.2,
    rebuild_limit=5,
    snapshot_s=0.3,
)


def test_a_node_with_replicas_and_targets_waits_for_every_step() -> None:
    # 12 replicas of volumes the node owns, one rebuild slot on each of 2 nodes: six rounds
    one_slot = DataPlaneDurations(**{**DURATIONS.__dict__, "rebuild_limit": 1})
    steps = node_steps(
        one_slot, NodeLoad(replicas=20, switched_volumes=4, owned_replicas=12, cluster_nodes=2)
    )
    assert steps == pytest.approx(
        {
            "initializing": 0.0,
            "failing-replicas": 0.15,
            "switching-over": 0.1,
            "upgrading-instance-manager": 0.5,
            "switching-back": 0.1,
            "rebuilding-replica": 0.04 + 6 * 0.2,
        }
    )
    assert node_steps(DURATIONS, NodeLoad(12, 4), snapshots=True)["initializing"] == 0.3


def test_only_the_rebuilds_of_the_nodes_own_volumes_count_at_least_one_round() -> None:
    # 30 replicas held, 10 of them of volumes the node owns, 5 slots on each of 5 nodes
    steps = node_steps(
        DURATIONS, NodeLoad(replicas=30, switched_volumes=10, owned_replicas=10, cluster_nodes=5)
    )
    assert steps["rebuilding-replica"] == pytest.approx(0.04 + 0.2)
    # replicas only of other nodes' volumes: rebuilt elsewhere under the switch-over, not counted
    assert node_steps(DURATIONS, NodeLoad(30, 0, 0, 5))["rebuilding-replica"] == 0.0


def test_with_placement_the_owned_replicas_rebuild_on_the_nodes_own_slots() -> None:
    """The simulator's scheduler puts every owned replica back on the emptied node when each other
    node holds at least as many replicas: ceil(O / L) rounds on its L slots, not the cluster's."""
    load = NodeLoad(replicas=30, switched_volumes=10, owned_replicas=10, cluster_nodes=5)
    placed = NodeLoad(30, 10, 10, 5, others_min_replicas=10)
    assert node_steps(DURATIONS, placed, placement=True)["rebuilding-replica"] == pytest.approx(
        0.04 + 2 * 0.2
    )
    # strict, or placement unknown, or another node holding fewer than O: the spread over every node
    assert node_steps(DURATIONS, placed)["rebuilding-replica"] == pytest.approx(0.04 + 0.2)
    assert node_steps(DURATIONS, load, placement=True)["rebuilding-replica"] == pytest.approx(0.04 + 0.2)
    fewer = NodeLoad(30, 10, 10, 5, others_min_replicas=9)
    assert node_steps(DURATIONS, fewer, placement=True)["rebuilding-replica"] == pytest.approx(0.04 + 0.2)
    assert upgrade_bound(DURATIONS, {"n1": placed}, [], placement=True).total_s == pytest.approx(
        0.15 + 0.1 + 0.5 + 0.1 + 0.04 + 2 * 0.2
    )


def test_a_node_with_nothing_to_move_only_restarts_its_instance_manager() -> None:
    steps = node_steps(DURATIONS, NodeLoad(replicas=0, switched_volumes=0), snapshots=True)
    assert sum(steps.values()) == pytest.approx(0.5)


def test_rebuilds_blocked_by_a_zero_limit_have_no_finite_bound() -> None:
    blocked = DataPlaneDurations(**{**DURATIONS.__dict__, "rebuild_limit": 0})
    assert node_steps(blocked, NodeLoad(1, 1, 1, 3))["rebuilding-replica"] == float("inf")


def test_the_upgrade_is_the_sum_of_its_nodes_and_each_switched_volume_is_suspended() -> None:
    replicas = [(v, n) for v in ("vol-a", "vol-b") for n in ("n1", "n2", "n3")] + [("vol-a", "elsewhere")]
    loads = loads_of(replicas, target_nodes={"vol-a": "n1", "vol-b": "n1"}, nodes=["n1", "n2", "n3"])
    assert loads == {
        "n1": NodeLoad(2, 2, 2, 3, 2),
        "n2": NodeLoad(2, 0, 0, 3, 2),
        "n3": NodeLoad(2, 0, 0, 3, 2),
    }
    bound = upgrade_bound(DURATIONS, loads, switched=["vol-b", "vol-a"])
    n1 = 0.15 + 0.1 + 0.5 + 0.1 + 0.24
    n2 = 0.15 + 0.5
    assert bound.per_node_s == pytest.approx({"n1": n1, "n2": n2, "n3": n2})
    assert bound.total_s == pytest.approx(n1 + 2 * n2)
    assert bound.io_gap_s == pytest.approx({"vol-a": 0.06, "vol-b": 0.06})  # suspend, switch, resume


def test_the_timeline_times_each_step_of_each_node_and_the_whole_upgrade() -> None:
    ticks = iter([0.0, 0.1, 0.3, 0.35, 1.0, 1.2, 1.5, 2.0, 9.0])
    started: list[str] = []
    timeline = StateTimeline(clock=lambda: next(ticks), on_node_start=started.append)
    managers, nodes = "dataengineupgrademanagers", "nodedataengineupgrades"

    def cr(state: str, node: str = "", name: str = "upgrade") -> dict[str, object]:
        return {"metadata": {"name": name}, "spec": {"nodeID": node}, "status": {"state": state}}

    timeline.observe(managers, None, cr(""))  # 0.0: created
    timeline.observe(nodes, None, cr("", "n1", "u1"))  # 0.1
    timeline.observe(nodes, cr("", "n1", "u1"), cr("initializing", "n1", "u1"))  # 0.3
    timeline.observe(nodes, cr("initializing", "n1", "u1"), cr("initializing", "n1", "u1"))  # same state
    timeline.observe(nodes, cr("initializing", "n1", "u1"), cr("failing-replicas", "n1", "u1"))  # 0.35
    timeline.observe(nodes, cr("failing-replicas", "n1", "u1"), cr("completed", "n1", "u1"))  # 1.0
    timeline.observe(nodes, None, cr("", "n2", "u2"))  # 1.2
    timeline.observe(nodes, cr("", "n2", "u2"), cr("error", "n2", "u2"))  # 1.5
    timeline.observe(managers, cr(""), cr("completed"))  # 2.0
    assert timeline.wall_s() == 2.0
    assert started == ["n1", "n2"]  # each node upgrade's creation, once
    steps = timeline.steps()
    assert steps.keys() == {"n1", "n2"}
    assert steps["n1"] == pytest.approx(
        {"created": 0.2, "initializing": 0.05, "failing-replicas": 0.65, "total": 0.9}
    )
    assert steps["n2"] == pytest.approx({"created": 0.3, "total": 0.3})
