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


def node_steps(durations: DataPlaneDurations, load: NodeLoad, *, snapshots: bool = False) -> dict[str, float]:
    """The least each step of one node upgrade takes, by state name."""
    d = durations
    switch = d.switch_over_s if load.switched_volumes else 0.0
    rebuild = 0.0
    if load.owned_replicas:
        slots = d.rebuild_limit * load.cluster_nodes
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
) -> UpgradeBound:
    """The bound of a whole upgrade of the nodes in `loads`, one at a time; `switched` names the
    attached volumes whose target moves during it."""
    per_node = {
        node: round(sum(node_steps(durations, load, snapshots=snapshots).values()), 6)
        for node, load in sorted(loads.items())
    }
    gaps = {volume: durations.io_gap_s for volume in sorted(switched)}
    return UpgradeBound(round(sum(per_node.values()), 6), per_node, gaps)


def loads_of(
    replicas: Iterable[tuple[str, str]], target_nodes: Mapping[str, str], nodes: Iterable[str]
) -> dict[str, NodeLoad]:
    """Each node's load from where the v2 replicas are ((volume, node) per replica) and where each
    attached v2 volume's target is (volume → node)."""
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
    return {node: NodeLoad(held[node], volumes[node], owned[node], len(held)) for node in held}
