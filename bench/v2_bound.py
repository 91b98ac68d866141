"""The fastest a v2 data-engine upgrade can go on the simulator's configured data-plane durations:
the lower bound bench_v2_upgrade.py sets its measured wall time and I/O gaps against.

The manager upgrades one node at a time, and within a node each step waits for the data plane to
finish the previous one (the decider moves on only once it sees the outcome), so the upgrade takes
at least the sum, over the nodes, of what one node cannot overlap:

    node = replica_stop + replica_delete             failing-replicas (the node's replicas at once)
         + switch_over                               switching-over (its attached volumes at once)
         + im_restart                                upgrading-instance-manager (the new v2 IM starts)
         + switch_over                               switching-back
         + replica_start + ceil(O / (L * N)) * rebuild
                                                     rebuilding-replica (below)
         (+ snapshot                                 initializing, with snapshot-before-upgrade on)

    switch_over = target_create + suspend + switch + resume
                                                     one volume's target moved (§5.5, last part): the
                                                     new target created, then the initiator suspended,
                                                     switched and resumed

Rebuilding: Longhorn replaces the replicas deleted on the node, but the volumes the node owns are
not replenished while it upgrades (SIM-V2, §5.4), so their O replicas are rebuilt only once the
node reaches `rebuilding-replica`: at least one rebuild, and no more at once than L (the per-node
rebuild limit) on each of the cluster's N nodes. The other volumes' replicas may be rebuilt on
other nodes as soon as they are deleted, under the switch-over and the IM restart, so the bound
counts nothing for them (with as many nodes as replicas they can only come back to the node, and
the true minimum is higher: the bound stays a lower bound).

Placement (the headline bound): the strict formula above lets a node's owned replicas spread over
all N nodes' slots, which this simulator's scheduler never does. With `placement`, when every other
node holds at least O replicas as the node upgrade moves to `rebuilding-replica` (read at the API
server before that write is committed: `NodeLoad.others_min_replicas`), the rounds are ceil(O / L)
on the node's own L slots. That is still what any decider must wait for:

1. The O replicas are created only once the node is released: the simulator replenishes no v2
   volume owned by a node whose `DataEngineUpgradeRequested` is True (SIM-V2, §5.4), and that
   condition turns False only when the node upgrade reaches `rebuilding-replica`, which §5.5 (the
   order every decider follows, and the strict bound already sums) reaches only after
   switching-back.
2. By then the node holds no replica at all (failing-replicas waits until none remains; the
   scheduler skips upgrading nodes, so none lands there meanwhile).
3. The scheduler (`volumes._place`) puts each new replica on the least-loaded schedulable node
   without one of its volume, counting every replica with a node (`ClusterFacts.replicas_per_node`,
   incremented as it places within the round). Replica counts on the other nodes can only grow
   from the moment they are read to the placement (nothing deletes a replica off the upgrading
   node; counting only v2 replicas not being deleted reads at most what the scheduler counts), so
   each other node still holds at least O; the node holds at most O - 1 before each placement:
   every one of the O lands on the node, whose rebuild limit admits L at a time.

No decider can change any of the three (no decider can steer Longhorn's scheduler). When the
condition does not hold, the node's bound falls back to the strict spread.

A step that has nothing to do on a node costs nothing: no replica there, no failing or rebuild; no
attached volume whose target it holds, no switch-over. Volumes of one step move in parallel, so
one duration per step is all the bound may count. Everything the services add (watch delay, the
decider's debounce, the actuator's round trips) is what the bench measures on top.

The I/O gap: an attached volume's target moves away and back once, and each move leaves it unable
to serve from the suspend to the end of the resume, so its longest gap is at least
`suspend + switch + resume` (SIM-IO's own definition of the gap). A volume whose target never moves
has a bound of 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class DataPlaneDurations:
    """The simulator's configured durations of the steps a v2 node upgrade waits for (seconds)."""

    replica_stop_s: float
    replica_delete_s: float
    target_create_s: float
    suspend_s: float
    switch_s: float
    resume_s: float
    im_restart_s: float
    replica_start_s: float
    rebuild_s: float
    rebuild_limit: int
    snapshot_s: float = 0.0

    @property
    def switch_over_s(self) -> float:
        """One volume's target moved: the new target created, then suspended, switched, resumed."""
        return self.target_create_s + self.suspend_s + self.switch_s + self.resume_s

    @property
    def io_gap_s(self) -> float:
        """The least a switch-over leaves a volume unable to serve: from its suspend to its resume."""
        return self.suspend_s + self.switch_s + self.resume_s


@dataclass(frozen=True)
class NodeLoad:
    """What one node's upgrade has to move: the v2 replicas on it (`owned_replicas` of them of
    volumes it owns), the attached v2 volumes whose target (engine) it holds, and how many nodes
    the cluster has to rebuild replicas on."""

    replicas: int
    switched_volumes: int
    owned_replicas: int = 0
    cluster_nodes: int = 1
    others_min_replicas: int | None = None
    """The fewest replicas any other node holds as this node is released (None: not known)."""

    def rebuilt_on_the_node(self) -> bool:
        """Whether the simulator's scheduler must put every owned replica back on the node (module
        docstring, "Placement")."""
        return self.others_min_replicas is not None and self.others_min_replicas >= self.owned_replicas


def node_steps(
    durations: DataPlaneDurations, load: NodeLoad, *, snapshots: bool = False, placement: bool = False
) -> dict[str, float]:
    """The least each step of one node upgrade takes, by state name; with `placement`, the owned
    replicas' rebuilds on the node's own slots when the scheduler must put them there."""
    d = durations
    switch = d.switch_over_s if load.switched_volumes else 0.0
    rebuild = 0.0
    if load.owned_replicas:
        nodes = 1 if placement and load.rebuilt_on_the_node() else load.cluster_nodes
        slots = d.rebuild_limit * nodes
        rounds = math.ceil(load.owned_replicas / slots) if slots > 0 else math.inf
        rebuild = d.replica_start_s + rounds * d.rebuild_s
    return {
        "initializing": d.snapshot_s if snapshots and load.switched_volumes else 0.0,
        "failing-replicas": d.replica_stop_s + d.replica_delete_s if load.replicas else 0.0,
        "switching-over": switch,
        "upgrading-instance-manager": d.im_restart_s,
        "switching-back": switch,
        "rebuilding-replica": rebuild,
    }


@dataclass(frozen=True)
class UpgradeBound:
    total_s: float
    per_node_s: dict[str, float]
    io_gap_s: dict[str, float]
    """Per attached volume: the least its longest I/O gap can be."""


def upgrade_bound(
    durations: DataPlaneDurations,
    loads: Mapping[str, NodeLoad],
    switched: Iterable[str],
    *,
    snapshots: bool = False,
    placement: bool = False,
) -> UpgradeBound:
    """The bound of a whole upgrade of the nodes in `loads`, one at a time; `switched` names the
    attached volumes whose target moves during it."""
    per_node = {
        node: round(sum(node_steps(durations, load, snapshots=snapshots, placement=placement).values()), 6)
        for node, load in sorted(loads.items())
    }
    gaps = {volume: durations.io_gap_s for volume in sorted(switched)}
    return UpgradeBound(round(sum(per_node.values()), 6), per_node, gaps)


def loads_of(
    replicas: Iterable[tuple[str, str]], target_nodes: Mapping[str, str], nodes: Iterable[str]
) -> dict[str, NodeLoad]:
    """Each node's load from where the v2 replicas are ((volume, node) per replica) and where each
    attached v2 volume's target is (volume → node); `others_min_replicas` from the same replicas
    (v2 only: the scheduler counts every replica, so this is never more than what it sees)."""
    held: dict[str, int] = dict.fromkeys(nodes, 0)
    owned: dict[str, int] = dict.fromkeys(held, 0)
    volumes: dict[str, int] = dict.fromkeys(held, 0)
    for volume, node in replicas:
        if node in held:
            held[node] += 1
            owned[node] += target_nodes.get(volume) == node
    for node in target_nodes.values():
        if node in volumes:
            volumes[node] += 1
    return {
        node: NodeLoad(
            held[node],
            volumes[node],
            owned[node],
            len(held),
            min((held[other] for other in held if other != node), default=None),
        )
        for node in held
    }
