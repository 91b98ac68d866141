"""Wave efficiency: how close a real engine-upgrade wave comes to the fastest schedule the limit allows.

Issue 18 part 2. In the sandbox, 200 volumes on 10 nodes, `concurrent-automatic-engine-upgrade-per-
node-limit` 3, about half attached: an attached volume upgrades live (LIVE_S of simulated work), a
detached one offline (OFFLINE_S), so which volumes are attached fixes each one's duration. The real
path: sandbox (in this process) → watcher → LH_OBJECTS → engine-upgrade (at its deployed
`debounce_s` unless told) → LH_COMMANDS → actuator → the emulator, the three services each in a
process of its own as deployed (`--services processes`, the default) or all in this process's event
loop as the scenario tests run them (`--services in-loop`; wave_stack.py says why the first is the
honest one). A Longhorn upgrade's writes start the wave
(corral_cli.demo.engine_wave.bring_engine_image: the new EngineImage, then the default-engine-image
setting); the wave starts at that setting's commit.

Each volume's start (the actuator's spec.image patch) and end (status.currentImage on the target)
are read from the emulator's own commit record (wave_timeline.py), so no watch delay is measured.
Reported (bench/results/wave.json):
* makespan_ratio: the wave's measured time (setting commit → last end) over the ideal makespan,
  the max over owner nodes of the optimal makespan of that node's upgrades on `limit` slots with
  the durations the upgrades actually took (schedule.py). Per node that is the proven optimum
  where the bounded search proves one, else a lower bound on it (max of the longest upgrade, the
  total over the slots, the pair that must share a slot, LPT over Graham's 4/3 - 1/(3 limit)),
  never the best schedule the search found: the ratio is never below the true one. The bracket
  is reported beside it (`ideal_best_found_s`, `ideal_lower_bound_s`, the ratio against each).
  `ideal_nominal_s` is the same with the configured durations (what the simulator adds to each
  upgrade shows as `upgrade_duration_s` against them).
* corral_order_no_idle_s / makespan_ratio_order_only: the same upgrades list-scheduled in the order
  corral started them per node, each freed slot refilled at once: the part of the gap that is the
  pick order (corral does not know durations; the optimum runs long upgrades first), not idle time.
  `live_first_no_idle_s` is the same with attached volumes (live upgrades) picked first, the order
  engine-upgrade now uses (services/engine-upgrade/.../pick_order.py), so the two agree but for
  volumes that attached or detached meanwhile.
* slot_idle_ms: for each slot freed while its node still had volumes waiting, the time until the
  next command for that node landed (p50, p99, max), and the hops that wait went to (wave_trace.py).
* longhorn_resync_model: the same upgrades, in the same order per node, under a controller that
  fills freed slots only at its 30 s resync (slots freed between ticks idle until the next one): the
  bound of Longhorn's controller when no event wakes it. See `longhorn_note` for when one does.
* load average and the host-speed calibration (ns of an empty Python call) before and after, as
  the other benches record them, this process's CPU share during the wave (`process_cpu_share`:
  the sandbox and the tap, and the services with `in-loop`), each service process's
  (`services_cpu_share`), and how late this process's event loop wakes a 10 ms sleep
  (`event_loop_lag_ms`): the sandbox's loop holds the emulator, so its lag delays every write and
  watch event of the wave.

Run: `.venv/bin/python -m bench.bench_wave [--debounce-s S] [--services processes|in-loop]`, one to
three minutes. Measures only.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import os
import statistics
import time
from typing import Any

from bench.bench_engine_upgrade import calibration_ns
from bench.report import scaled, write_report
from bench.schedule import ideal, list_schedule, resync_schedule
from bench.wave_stack import PROCESSES, add_stack_options, running
from bench.wave_timeline import Upgrade, slot_idle, summary, trigger_time, upgrades
from bench.wave_trace import BusTap, LoopLag, hops
from corral_bus import connect, ensure_streams
from corral_cli.demo.engine_wave import DEFAULT_IMAGE_SETTING, bring_engine_image
from corral_engine_upgrade.service import DEFINITION
from corral_engine_upgrade.view import LIMIT_SETTING
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import Seed, default_seed, resized
from tests.fixtures.nats import BinaryNats
from tests.fixtures.sandbox import UPGRADE_IMAGE, fast_config

NODES, VOLUMES, LIMIT = scaled(10, 3), scaled(200, 9), 3
LIVE_S, OFFLINE_S = 2.5, 1.0  # simulated seconds of one live / offline upgrade
RESYNC_S = 30.0  # Longhorn's informer resync
WAVE_TIMEOUT_S = 120.0
HISTORY = 100_000  # emulator watch history per kind: the whole wave's volume changes stay readable


def wave_seed() -> Seed:
    """The default cluster resized: every volume on the default image, half attached, limit set."""
    seed = resized(default_seed(), nodes=NODES, volumes=VOLUMES)
    return dataclasses.replace(seed, settings={**seed.settings, LIMIT_SETTING: str(LIMIT)})


@dataclasses.dataclass
class Run:
    wave: list[Upgrade]
    trigger: float
    tap: BusTap
    lag: LoopLag
    cpu_share: float
    services_cpu_share: dict[str, float]


async def run_wave(debounce_s: float, services: str = PROCESSES) -> Run:
    seed = wave_seed()
    config = fast_config(live_upgrade_seconds=LIVE_S, offline_upgrade_seconds=OFFLINE_S)
    nats = BinaryNats()
    nats.start()
    try:
        bus = await connect(nats.url, name="bench-wave")
        await ensure_streams(bus.js)
        options = {"history_size": HISTORY}
        async with (
            SandboxCluster(seed, sim_config=config, emulator_options=options) as cluster,
            running(
                services, str(cluster.kubeconfig_path), nats.url, debounce_s, cluster.kubeconfig_path.parent
            ) as stack,
        ):
            kubeconfig = str(cluster.kubeconfig_path)
            tap = BusTap(UPGRADE_IMAGE)
            await tap.start(bus, seed.namespace)
            lag = LoopLag()
            lag.start()
            cpu, wall, services_cpu = time.process_time(), time.monotonic(), stack.cpu_s()
            await bring_engine_image(kubeconfig, seed.namespace, UPGRADE_IMAGE)
            await tap.wait_all_on_image(VOLUMES, WAVE_TIMEOUT_S)
            elapsed = time.monotonic() - wall
            cpu_share = (time.process_time() - cpu) / elapsed
            services_share = {n: round((s - services_cpu[n]) / elapsed, 2) for n, s in stack.cpu_s().items()}
            await lag.stop()
            await tap.stop()
            trigger = trigger_time(cluster.emulator, seed.namespace, DEFAULT_IMAGE_SETTING, UPGRADE_IMAGE)
            wave = upgrades(cluster.emulator, seed.namespace, UPGRADE_IMAGE)
        await bus.close()
    finally:
        nats.stop()
    return Run(wave, trigger, tap, lag, cpu_share, services_share)


def nominal(upgrade: Upgrade) -> float:
    return LIVE_S if upgrade.live else OFFLINE_S


def live_first(mine: list[Upgrade]) -> list[Upgrade]:
    """Corral's order with attached volumes (live upgrades, the long ones) moved ahead: what-if."""
    return sorted(mine, key=lambda u: not u.live)


def figures(run: Run, debounce_s: float, services: str = PROCESSES) -> dict[str, Any]:
    by_node: dict[str, list[Upgrade]] = collections.defaultdict(list)
    for upgrade in sorted(run.wave, key=lambda u: u.start):
        by_node[upgrade.owner].append(upgrade)
    per_node: dict[str, dict[str, Any]] = {}
    resync_idle: list[float] = []
    for node, mine in sorted(by_node.items()):
        best = ideal([u.duration_s for u in mine], LIMIT)
        resync = resync_schedule([u.duration_s for u in mine], LIMIT, RESYNC_S)
        resync_idle += resync.idle_s
        per_node[node] = {
            "volumes": len(mine),
            "live": sum(u.live for u in mine),
            "measured_s": round(max(u.end for u in mine) - run.trigger, 3),
            "ideal_s": round(best.makespan_s, 3),
            "ideal_exact": best.exact,
            "ideal_best_found_s": round(best.best_found_s, 3),
            "ideal_lower_bound_s": round(best.lower_bound_s, 3),
            "ideal_lpt_s": round(best.lpt_s, 3),
            "ideal_nominal_s": round(ideal([nominal(u) for u in mine], LIMIT).makespan_s, 3),
            "corral_order_s": round(list_schedule([u.duration_s for u in mine], LIMIT), 3),
            "live_first_s": round(list_schedule([u.duration_s for u in live_first(mine)], LIMIT), 3),
            "longhorn_resync_s": round(resync.makespan_s, 3),
        }
    measured = max(u.end for u in run.wave) - run.trigger
    ideal_s = max(n["ideal_s"] for n in per_node.values())
    lower = max(n["ideal_lower_bound_s"] for n in per_node.values())
    best_found = max(n["ideal_best_found_s"] for n in per_node.values())
    ideal_nominal = max(n["ideal_nominal_s"] for n in per_node.values())
    resync_s = max(n["longhorn_resync_s"] for n in per_node.values())
    corral_order = max(n["corral_order_s"] for n in per_node.values())
    live_first_s = max(n["live_first_s"] for n in per_node.values())
    idle = slot_idle(run.wave, run.trigger, LIMIT)
    live = [u.duration_s for u in run.wave if u.live]
    offline = [u.duration_s for u in run.wave if not u.live]
    return {
        "volumes": VOLUMES,
        "nodes": NODES,
        "limit": LIMIT,
        "live_upgrade_s": LIVE_S,
        "offline_upgrade_s": OFFLINE_S,
        "debounce_s": debounce_s,
        "services": services,
        "actuator_qps": "unlimited (CORRAL_QPS=0, as the scenario stack's actuator)",
        "volumes_upgraded": len(run.wave),
        "upgrades_live": len(live),
        "upgrades_offline": len(offline),
        "upgrade_duration_s": {
            "live": summary(live, scale=1.0),
            "offline": summary(offline, scale=1.0),
            "live_overhead_over_nominal_s": round(statistics.mean(live) - LIVE_S, 3) if live else None,
            "offline_overhead_over_nominal_s": round(statistics.mean(offline) - OFFLINE_S, 3)
            if offline
            else None,
        },
        "measured_s": round(measured, 3),
        "measured_from_first_command_s": round(
            max(u.end for u in run.wave) - min(u.start for u in run.wave), 3
        ),
        "ideal_makespan_s": ideal_s,
        "ideal_exact_on_every_node": all(n["ideal_exact"] for n in per_node.values()),
        "ideal_lower_bound_s": lower,
        "ideal_best_found_s": best_found,
        "ideal_semantics": (
            "per owner node: the proven optimal makespan on `limit` slots with the measured "
            "durations, else a lower bound on it (max(longest, total/limit, the pair sharing a slot, "
            "LPT*3L/(4L-1))); the wave's ideal is the max over nodes, so never above the optimum"
        ),
        "makespan_ratio": round(measured / ideal_s, 4),
        "makespan_ratio_vs_lower_bound": round(measured / lower, 4),
        "makespan_ratio_vs_best_found": round(measured / best_found, 4),
        "ideal_nominal_s": ideal_nominal,
        "corral_order_no_idle_s": corral_order,
        "makespan_ratio_order_only": round(corral_order / ideal_s, 4),
        "live_first_no_idle_s": live_first_s,
        "makespan_ratio_live_first_no_idle": round(live_first_s / ideal_s, 4),
        "makespan_ratio_vs_nominal": round(measured / ideal_nominal, 4),
        "slot_idle_ms": summary([r.idle_s for r in idle.refills]),
        "slot_idle_hops": hops(idle.refills, run.tap),
        "first_command_ms": summary(idle.first_command),
        "max_in_flight_per_node": max(idle.max_in_flight.values()),
        "limit_overshoots": idle.overshoots,
        "longhorn_resync_model": {
            "makespan_s": resync_s,
            "makespan_ratio": round(resync_s / ideal_s, 3),
            "slot_idle_ms": summary(resync_idle),
            "model": (
                f"the same upgrades and durations, in corral's order per node; freed slots are filled "
                f"only at resync ticks every {RESYNC_S:.0f} s from the wave's start (a tick at the start, "
                f"the best phase), so each freed slot idles up to {RESYNC_S:.0f} s"
            ),
        },
        "longhorn_note": (
            "longhorn-behaviour.md 1.2: Longhorn's auto-upgrade step runs in the default EngineImage's "
            "sync, which any Volume update naming that image also enqueues, so a finished upgrade "
            "normally triggers a new round within its work queue's latency; the resync model is the "
            "bound when that round does not run or stops early (an EI sync that returns before the "
            "step, a volume update conflict that aborts the loop, a key dropped after 3 retries)"
        ),
        "per_node": per_node,
        "process_cpu_share": round(run.cpu_share, 2),
        "services_cpu_share": run.services_cpu_share,
        "event_loop_lag_ms": summary(run.lag.lags),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_stack_options(parser, DEFINITION)
    args = parser.parse_args()
    calibration_before, load_before = calibration_ns(), os.getloadavg()[0]
    run = asyncio.run(run_wave(args.debounce_s, args.services))
    report = figures(run, args.debounce_s, args.services)
    report["load_average_1m_before"] = round(load_before, 2)
    report["load_average_1m_after"] = round(os.getloadavg()[0], 2)
    report["calibration_empty_call_ns_before"] = round(calibration_before, 1)
    report["calibration_empty_call_ns_after"] = round(calibration_ns(), 1)
    write_report(
        "wave",
        report,
        floors={
            "makespan_ratio": "<= 1.10 (measured wave / ideal makespan per owner node under the limit)",
            "slot_idle_ms.p99": "<= 250",
        },
    )


if __name__ == "__main__":
    main()
