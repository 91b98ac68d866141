"""A v2 data-engine upgrade of 5 nodes and 50 attached v2 volumes, against the fastest the simulated
data plane allows (issue 15). `python -m bench.bench_v2_upgrade` writes
bench/results/v2_upgrade.json; about a minute.

The real path: the sandbox in this process (SIM-V2 data plane, SIM-IO ledger) → watcher →
LH_OBJECTS → v2-upgrade (its deployed `debounce_s`) → LH_COMMANDS → actuator → the emulator, the
three services each in a process of its own as deployed (`--services processes`, the default) or
all in this process's event loop as the v2 scenarios run them (`--services in-loop`; wave_stack.py
says why the first is the honest one: in the loop every hop waits behind the sandbox). The
operator's writes start it: the new instance-manager image pulled on every node and set as
`default-instance-manager-image`, then a DataEngineUpgradeManager for every node.

The cluster: 5 nodes, 50 v2 volumes of 3 replicas, attached round-robin (10 per node, each
volume's engine on its node), the simulator's data-plane durations below (DURATIONS): long enough
that the data plane, not the services, should dominate, as it does in a real cluster (where an IM
restart and a rebuild take far longer still).

Reported, each beside its lower bound (v2_bound.py, whose docstring gives the formula: per node,
the sum of the steps that cannot overlap; the nodes one after another):
* `wall_s`: the manager's creation to its `completed`, as the API server took those writes
  (v2_timeline.py), against `bound_s`; `ratio` = wall / bound, floor ≤ 1.5. `bound_s` is the
  placement-aware bound (v2_bound.py, "Placement"): a node's own volumes' replicas rebuilt on the
  node's rebuild slots, where the simulator's scheduler must put them (checked per node from the
  layout as its upgrade starts; a node where it need not falls back to the strict spread);
* `strict_bound_s`, `ratio_vs_strict_bound`, `floor_met_vs_strict_bound`: the same against the
  strict bound, which lets those rebuilds spread over every node's slots (no decider can make the
  simulator's scheduler do that);
* `per_node`: each node upgrade's measured time and bound (its load read as its upgrade starts:
  earlier nodes' rebuilds move replicas), and per step the measured time, the step's bound and the
  difference (`overhead_s`): where the services' time goes; `overhead_by_step_s` sums it per step;
* `io_gap_s`: the longest interval each attached volume could not serve, from the SIM-IO ledger
  (p50/p99/max over volumes, in seconds) against the bound of one switch-over's suspension; and
  the detaches SIM-IO counted (0: no volume ever detached);
* load average and the host-speed calibration (ns of an empty Python call) before and after, as
  every bench records them, how late this process's event loop (the sandbox's) ran a 10 ms sleep,
  and each service process's CPU share during the upgrade (`services_cpu_share`).
Measures only.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import time
from collections import Counter
from typing import Any

from bench.bench_engine_upgrade import calibration_ns
from bench.report import scaled, write_report
from bench.v2_bound import DataPlaneDurations, NodeLoad, loads_of, node_steps, upgrade_bound
from bench.v2_timeline import StateTimeline
from bench.wave_stack import PROCESSES, add_stack_options, running, v2_upgrade
from bench.wave_timeline import summary
from bench.wave_trace import LoopLag
from corral_bus import connect, ensure_streams
from corral_kube.client import api_client
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import Seed
from corral_sandbox.seeds.v2 import v2_seed
from corral_sandbox.simulator import SimConfig
from corral_sandbox.simulator.io_ledger import io_report
from corral_v2_upgrade.service import DEFINITION
from tests.fixtures.nats import BinaryNats
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox, fast_config
from tests.scenarios.v2_upgrade.scenario import (
    NEW_IM,
    create_manager,
    manager,
    pull_image,
    set_target_image,
    settled,
    state,
)

NODES, VOLUMES, REPLICAS = scaled(5, 3), scaled(50, 4), 3
FLOOR = 1.5
TIMEOUT_S = 300.0
HISTORY = 100_000  # emulator watch history per kind: the whole upgrade stays readable
DURATIONS: dict[str, float] = {
    "instance_start_seconds": 0.05,
    "instance_stop_seconds": 0.1,
    "v2_target_create_seconds": 0.1,
    "v2_suspend_seconds": 0.05,
    "v2_switch_seconds": 0.2,
    "v2_resume_seconds": 0.05,
    "v2_im_startup_seconds": 2.0,
    "rebuild_seconds": 1.0,
}
"""Simulated seconds of each data-plane step (SimConfig fields), the bound's inputs."""


NODE_NAMES = tuple(f"node-{i}" for i in range(1, NODES + 1))


def bench_seed() -> Seed:
    return v2_seed(nodes=NODES, volumes=VOLUMES, replicas=REPLICAS, attached_to=NODE_NAMES)


def bench_config() -> SimConfig:
    return fast_config(**DURATIONS)


def durations_of(config: SimConfig, rebuild_limit: int) -> DataPlaneDurations:
    return DataPlaneDurations(
        replica_stop_s=config.instance_stop_seconds,
        replica_delete_s=0.0,
        target_create_s=config.v2_target_create_seconds,
        suspend_s=config.v2_suspend_seconds,
        switch_s=config.v2_switch_seconds,
        resume_s=config.v2_resume_seconds,
        im_restart_s=config.v2_im_start_seconds,
        replica_start_s=config.instance_start_seconds,
        rebuild_s=config.rebuild_seconds,
        rebuild_limit=rebuild_limit,
    )


@dataclasses.dataclass
class Run:
    timeline: StateTimeline
    loads: dict[str, Any]
    targets: dict[str, str]
    longest_gaps: dict[str, float]
    detaches: int
    rebuild_limit: int
    lag: LoopLag
    final: dict[str, Any]
    services_cpu_share: dict[str, float]


def io_ledger(cluster: SandboxCluster) -> tuple[dict[str, float], int]:
    """Per volume the longest interval it could not serve (s), and the detaches, from SIM-IO."""
    simulator = cluster.simulator
    report = io_report(simulator.memory, simulator.clock.now())
    longest = {name: float(v["longestGap"]) for name, v in report["volumes"].items()}
    return longest, sum(int(v["detaches"]) for v in report["volumes"].values())


async def run_upgrade(debounce_s: float, services: str = PROCESSES) -> Run:
    seed, config = bench_seed(), bench_config()
    nats = BinaryNats()
    nats.start()
    try:
        bus = await connect(nats.url, name="bench-v2-upgrade")
        await ensure_streams(bus.js)
        options = {"history_size": HISTORY}
        async with SandboxCluster(seed, sim_config=config, emulator_options=options) as cluster:
            kubeconfig = str(cluster.kubeconfig_path)
            api = await api_client(kubeconfig)
            sandbox = Sandbox(cluster, api, seed.namespace)
            decider = v2_upgrade(node_timeout_s=0.0)
            workdir = cluster.kubeconfig_path.parent
            try:
                async with running(services, kubeconfig, nats.url, debounce_s, workdir, decider) as stack:
                    setting = await sandbox.get("settings", "concurrent-replica-rebuild-per-node-limit")
                    loads: dict[str, NodeLoad] = {}
                    targets: dict[str, str] = {}

                    def held_replicas() -> list[tuple[str, str]]:
                        return [
                            (r["spec"]["volumeName"], r["spec"]["nodeID"])
                            for r in cluster.emulator.list("longhorn.io", "replicas", seed.namespace)
                            if r["spec"].get("dataEngine") == "v2"
                            and not r["metadata"].get("deletionTimestamp")
                        ]

                    def layout(node: str) -> None:
                        """The node's load as its upgrade starts (earlier nodes' rebuilds moved replicas)."""
                        emulator, ns = cluster.emulator, seed.namespace
                        volumes = emulator.list("longhorn.io", "volumes", ns)
                        owners = {
                            v["metadata"]["name"]: v["spec"]["nodeID"]
                            for v in volumes
                            if v["spec"].get("nodeID")
                        }
                        targets.update(owners)
                        load = loads_of(held_replicas(), owners, NODE_NAMES)[node]
                        # placement is judged only as the node is released (`released`)
                        loads[node] = dataclasses.replace(load, others_min_replicas=None)

                    def released(node: str, state: str) -> None:
                        """As the node upgrade moves to rebuilding-replica (before the simulator can
                        see it and release the node), the fewest replicas another node holds: from
                        then on that only grows (v2_bound.py, "Placement")."""
                        if state != "rebuilding-replica" or node not in loads:
                            return
                        held = Counter(n for _, n in held_replicas())
                        fewest = min(held[other] for other in NODE_NAMES if other != node)
                        loads[node] = dataclasses.replace(loads[node], others_min_replicas=fewest)

                    timeline = StateTimeline(on_node_start=layout, on_node_state=released).attach(
                        cluster.emulator
                    )
                    lag = LoopLag()
                    lag.start()
                    await settled(sandbox)
                    await pull_image(sandbox, NEW_IM, NODE_NAMES)
                    await set_target_image(sandbox, NEW_IM)
                    cpu_before, started = stack.cpu_s(), time.monotonic()
                    await create_manager(sandbox)

                    async def finished() -> dict[str, Any] | None:
                        found = await manager(sandbox)
                        return found if state(found) in ("completed", "error") else None

                    final = await eventually(
                        finished, within=TIMEOUT_S, what="the upgrade to finish", interval=0.1
                    )
                    await lag.stop()
                    elapsed = time.monotonic() - started
                    cpu_share = {n: round((s - cpu_before[n]) / elapsed, 2) for n, s in stack.cpu_s().items()}
                    longest, detaches = io_ledger(cluster)
            finally:
                await api.close()
        await bus.close()
    finally:
        nats.stop()
    rebuild_limit = int(setting["value"])
    return Run(timeline, loads, targets, longest, detaches, rebuild_limit, lag, final, cpu_share)


def _ratio(wall: float | None, bound_s: float) -> float | None:
    """Wall time over a bound, where both are known and the bound is finite."""
    return round(wall / bound_s, 3) if wall and bound_s and math.isfinite(bound_s) else None


def figures(run: Run, debounce_s: float, services: str = PROCESSES) -> dict[str, Any]:
    config = bench_config()
    durations = durations_of(config, run.rebuild_limit)
    # The headline bound: the owned replicas rebuilt where the simulator's scheduler must put them.
    bound = upgrade_bound(durations, run.loads, run.targets, placement=True)
    strict = upgrade_bound(durations, run.loads, run.targets)
    wall = run.timeline.wall_s()
    steps = run.timeline.steps()
    per_node: dict[str, Any] = {}
    for node, load in sorted(run.loads.items()):
        step_bounds = node_steps(durations, load, placement=True)
        measured = steps.get(node, {})
        per_node[node] = {
            "replicas": load.replicas,
            "replicas_of_owned_volumes": load.owned_replicas,
            "fewest_replicas_on_another_node_at_release": load.others_min_replicas,
            "owned_rebuilt_on_the_node": load.rebuilt_on_the_node(),
            "switched_volumes": load.switched_volumes,
            "measured_s": measured.get("total"),
            "bound_s": bound.per_node_s[node],
            "strict_bound_s": strict.per_node_s[node],
            "steps": {
                name: {
                    "measured_s": measured.get(name),
                    "bound_s": round(step_bounds.get(name, 0.0), 3),
                    "overhead_s": round(measured[name] - step_bounds.get(name, 0.0), 3)
                    if name in measured
                    else None,
                }
                for name in ("created", *step_bounds, "finalizing")
            },
        }
    gaps = list(run.longest_gaps.values())
    gap_bounds = list(bound.io_gap_s.values())
    total_overhead = {
        name: round(sum((n["steps"][name]["overhead_s"] or 0.0) for n in per_node.values()), 3)
        for name in (
            "created",
            "initializing",
            "failing-replicas",
            "switching-over",
            "upgrading-instance-manager",
            "switching-back",
            "rebuilding-replica",
            "finalizing",
        )
    }
    return {
        "nodes": NODES,
        "volumes": VOLUMES,
        "replicas_per_volume": REPLICAS,
        "services": services,
        "debounce_s": debounce_s,
        "simulated_durations_s": DURATIONS,
        "rebuild_limit_per_node": run.rebuild_limit,
        "manager": {"state": state(run.final), "message": run.final["status"].get("message", "")},
        "wall_s": round(wall, 3) if wall is not None else None,
        "bound_s": bound.total_s,
        "ratio": _ratio(wall, bound.total_s),
        "floor_met": bool(wall is not None and wall <= FLOOR * bound.total_s),
        "strict_bound_s": strict.total_s,
        "ratio_vs_strict_bound": _ratio(wall, strict.total_s),
        "floor_met_vs_strict_bound": bool(wall is not None and wall <= FLOOR * strict.total_s),
        "overhead_by_step_s": total_overhead,
        "per_node": per_node,
        "io_gap_s": {
            "longest_per_volume": summary(gaps, scale=1.0),
            "bound_per_volume": summary(gap_bounds, scale=1.0),
            "ratio_max": round(max(gaps) / max(gap_bounds), 3) if gaps and gap_bounds else None,
            "volumes_without_gap": sum(1 for g in gaps if g == 0.0),
        },
        "detaches": run.detaches,
        "event_loop_lag_ms": summary(run.lag.lags),
        "services_cpu_share": run.services_cpu_share,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_stack_options(parser, DEFINITION)
    args = parser.parse_args()
    calibration_before, load_before = calibration_ns(), os.getloadavg()[0]
    started = time.monotonic()
    run = asyncio.run(run_upgrade(args.debounce_s, args.services))
    report = figures(run, args.debounce_s, args.services)
    report["bench_wall_s"] = round(time.monotonic() - started, 1)
    report["load_average_1m_before"] = round(load_before, 2)
    report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    report["calibration_empty_call_ns_before"] = round(calibration_before, 1)
    report["calibration_empty_call_ns_after"] = round(calibration_ns(), 1)
    write_report(
        "v2_upgrade",
        report,
        floors={
            "ratio": f"<= {FLOOR} (wall time / the data plane's lower bound with the simulator's "
            "replica placement, v2_bound.py; the strict bound's ratio is reported beside it)"
        },
    )


if __name__ == "__main__":
    main()
