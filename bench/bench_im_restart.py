"""Decision-only cost of the im-restart decider at 5 k instance managers (issue 14: <= 10 us per
event). `python -m bench.bench_im_restart` writes bench/results/im_restart.json.

The cluster: 2 500 nodes (allocatable CPU 4, 8 or 16) with two v1 IMs each, every pod built from
the settings in force, every IM already SettingSynced=True; half the IMs host a running replica.
Events are made untimed, then each is applied and decided alone (`apply` + `decide`, timed with
perf_counter), as the runner would after a quiet debounce:

* instance start/stop: an IM's replica goes running <-> stopped (the most frequent event);
* pod update: an IM pod's resourceVersion and restart count move (a new pod shape to encode);
* setting change: `priority-class` changes, so every pod lags: all 5 k IMs are judged again and
  each gets its condition patch, each idle one its delete (the output is 7.5 k commands: this is
  the cost of the whole wave of decisions, not of one event);
* setting change without effect on pods: a danger-zone setting no predicate reads changes, so all
  5 k IMs are judged again (memo hits) and nothing is sent.

Figures: p50, mean and p99 per event (us, wall) and the mean thread CPU time per event, for each
kind and for the mixed stream of the first two (`per_event_us`), each the median of ROUNDS rounds
(the machine is shared and its speed swings within seconds); the cost of the setting changes;
`calibration_empty_call_ns` as bench_engine_upgrade (ns of an empty Python call, measured after
each round: a figure divided by it compares across machines and loads) and the load average.

Then the sandbox figure (im_restart_latency.py): `idle_to_delete_ms`, p50/p99 over 50 runs of the
time from an IM's last instance stopping to its pod's delete through the whole stack, beside
Longhorn's 30 s resync bound. `--decision-only` skips it. Measures only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import msgspec

from bench.bench_engine_upgrade import calibration_ns, fixed_clock
from bench.im_restart_latency import measure
from bench.report import scaled, write_report
from bench.versioned import VersionedCluster
from corral_dangerzone.pod_spec import expected_instance_manager_pod
from corral_dangerzone.settings import DangerZoneSettings
from corral_im_restart.core import READS, ImRestartDecider
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent

NS = "longhorn-system"
NODES = [f"worker-{i:04d}" for i in range(scaled(2500, 50))]
IMS_PER_NODE = 2
CPUS = ("4", "8", "16")
EVENTS = scaled(20_000, 1_000)
BATCH = 50
ROUNDS = scaled(5, 1)
SETTING_CHANGES = 3
SYNCED = (lh.Condition(type="SettingSynced", status="True"),)


class Cluster(VersionedCluster):
    def __init__(self, seed: int = 14) -> None:
        super().__init__(seed, NS)
        self.ims: dict[str, lh.InstanceManager] = {}

    def bootstrap(self) -> list[ObjectEvent[Any]]:
        settings = DangerZoneSettings.defaults()
        events: list[ObjectEvent[Any]] = []
        templates: dict[str, lh.Pod] = {}
        for i, name in enumerate(NODES):
            cpu = CPUS[i % len(CPUS)]
            node = lh.Node(
                metadata=lh.ObjectMeta(name=name, namespace=NS),
                status=lh.NodeStatus(conditions=(lh.Condition(type="Ready", status="True"),)),
            )
            kube = lh.KubeNode(
                metadata=lh.ObjectMeta(name=name), status=lh.KubeNodeStatus(allocatable={"cpu": cpu})
            )
            events += [self.event("node", node), self.event("kubenode", kube)]
            for j in range(IMS_PER_NODE):
                im_name = f"instance-manager-{i:04d}-{j}"
                replicas = (
                    {"r": lh.InstanceProcess(status=lh.InstanceProcessStatus(state="running"))} if j else {}
                )
                im = lh.InstanceManager(
                    metadata=lh.ObjectMeta(name=im_name, namespace=NS, uid=f"uid-{im_name}"),
                    spec=lh.InstanceManagerSpec(node_id=name),
                    status=lh.InstanceManagerStatus(
                        current_state="running", instance_replicas=replicas, conditions=SYNCED
                    ),
                )
                if cpu not in templates:
                    templates[cpu] = expected_instance_manager_pod(im, settings, node, kube).to_pod("", NS)
                template = templates[cpu]
                pod = msgspec.structs.replace(
                    template,
                    metadata=msgspec.structs.replace(
                        template.metadata,
                        name=im_name,
                        uid=f"pod-{im_name}",
                        labels={"longhorn.io/component": "instance-manager"},
                        owner_references=(lh.OwnerReference(kind="InstanceManager", name=im_name),),
                    ),
                    spec=msgspec.structs.replace(template.spec, node_name=name),
                    status=lh.PodStatus(
                        phase="Running", container_statuses=(lh.ContainerStatus(ready=True),)
                    ),
                )
                self.ims[im_name], self.pods[im_name] = im, pod
                events += [self.event("instancemanager", im), self.event("pod", pod)]
        for kind in sorted(READS):
            events.append(ObjectEvent(type=EventType.RESYNCED, kind=kind, namespace=NS, name=""))
        return events

    def instance_toggle(self) -> ObjectEvent[Any]:
        name = self.rng.choice(list(self.ims))
        im = self.ims[name]
        state = (
            "stopped"
            if im.status.instance_replicas.get("r", _STOPPED).status.state == "running"
            else "running"
        )
        replicas = {"r": lh.InstanceProcess(status=lh.InstanceProcessStatus(state=state))}
        im = self.ims[name] = msgspec.structs.replace(
            im, status=msgspec.structs.replace(im.status, instance_replicas=replicas)
        )
        return self.event("instancemanager", im)


_STOPPED = lh.InstanceProcess(status=lh.InstanceProcessStatus(state="stopped"))


def timed_each(decider: ImRestartDecider, events: list[ObjectEvent[Any]]) -> list[float]:
    perf, apply, decide = time.perf_counter, decider.apply, decider.decide
    walls = []
    for event in events:
        start = perf()
        apply(event)
        decide()
        walls.append(perf() - start)
    return walls


def timed_stream(
    decider: ImRestartDecider, make: Callable[[], ObjectEvent[Any]], count: int
) -> tuple[list[float], list[float]]:
    """`count` events, made untimed in batches of BATCH just before they are applied (as a runner
    decodes an event just before applying it), each applied and decided alone. Returns the wall
    time of each event, and this thread's CPU time per event of each batch (the machine is shared:
    wall time includes waiting for a core; reading the CPU clock per event would cost more than
    the event)."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(count // BATCH):
        batch = [make() for _ in range(BATCH)]
        cpu = time.thread_time()
        walls += timed_each(decider, batch)
        cpus.append((time.thread_time() - cpu) / BATCH)
    return walls, cpus


def summary(walls: list[float], cpus: list[float]) -> dict[str, float]:
    """p50, mean and p99 of the events' wall times, and the mean thread CPU time per event."""
    return {
        "p50_us": round(statistics.median(walls) * 1e6, 2),
        "mean_us": round(statistics.fmean(walls) * 1e6, 2),
        "p99_us": round(sorted(walls)[int(len(walls) * 0.99)] * 1e6, 2),
        "cpu_mean_us": round(statistics.fmean(cpus) * 1e6, 2),
    }


def setting_event(cluster: Cluster, name: str, value: str) -> ObjectEvent[Any]:
    return cluster.event("setting", lh.Setting(metadata=lh.ObjectMeta(name=name, namespace=NS), value=value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--decision-only", action="store_true", help="skip the sandbox latency runs")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    calibration_before = calibration_ns()
    cluster = Cluster()
    decider = ImRestartDecider(fixed_clock())
    started = time.perf_counter()
    for event in cluster.bootstrap():
        decider.apply(event)
    first = decider.decide()
    bootstrap_ms = (time.perf_counter() - started) * 1000
    assert not first, "a synced cluster needs no command"
    gc.collect()
    gc.freeze()

    toggle = itertools.cycle((cluster.instance_toggle, cluster.pod_update))
    streams: dict[str, Callable[[], ObjectEvent[Any]]] = {
        "instance_start_stop_us": cluster.instance_toggle,
        "pod_update_us": cluster.pod_update,
        "per_event_us": lambda: next(toggle)(),
    }
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in streams}
    calibrations = []
    for _ in range(ROUNDS):  # the machine is shared: each figure is the median of its rounds
        for name, make in streams.items():
            rounds[name].append(summary(*timed_stream(decider, make, EVENTS // ROUNDS)))
        calibrations.append(calibration_ns())
    calibration = statistics.median(calibrations)
    per_kind: dict[str, dict[str, Any]] = {
        name: {field: round(statistics.median(r[field] for r in runs), 2) for field in runs[0]}
        | {"p50_us_rounds": [r["p50_us"] for r in runs]}
        for name, runs in rounds.items()
    }

    # A setting no §4.5 predicate reads: every IM judged again, nothing to send.
    quiet_walls = []
    for value in ("6", "5", "7")[:SETTING_CHANGES]:
        quiet_walls += timed_each(
            decider, [setting_event(cluster, "concurrent-replica-rebuild-per-node-limit", value)]
        )
    # priority-class: every pod lags; each IM gets its condition, each idle one its delete.
    event = setting_event(cluster, "priority-class", "high")
    start = time.perf_counter()
    decider.apply(event)
    commands = len(decider.decide())
    loud = time.perf_counter() - start
    ims = len(cluster.ims)

    figures: dict[str, Any] = {
        "instance_managers": ims,
        "nodes": len(NODES),
        "bootstrap_ms": round(bootstrap_ms, 1),
        **per_kind,
        "setting_change_no_pod_effect_ms": round(statistics.median(quiet_walls) * 1000, 2),
        "setting_change_no_pod_effect_us_per_im": round(statistics.median(quiet_walls) * 1e6 / ims, 2),
        "setting_change_all_pods_lag_ms": round(loud * 1000, 1),
        "setting_change_all_pods_lag_us_per_command": round(loud * 1e6 / max(commands, 1), 2),
        "setting_change_all_pods_lag_commands": commands,
        "per_event_p50_in_empty_calls": round(per_kind["per_event_us"]["p50_us"] * 1000 / calibration, 1),
        "calibration_empty_call_ns": round(calibration, 1),
        "calibration_empty_call_ns_rounds": [round(c, 1) for c in calibrations],
        "calibration_empty_call_ns_before": round(calibration_before, 1),
        "events_per_kind": EVENTS,
        "load_average_1m_before": round(load_before, 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
    }
    gc.unfreeze()
    if not args.decision_only:
        figures.update(asyncio.run(measure()))
    write_report(
        "im_restart",
        figures,
        floors={
            "per_event_us": "<= 10 (p50 and mean; instance start/stop and pod updates at 5 k IMs)",
            "setting_change_*": "reported: a settings change judges every IM (memoised by pod shape)",
            "idle_to_delete_ms": "p99 <= 1000 in the sandbox (Longhorn: up to its 30 s IM resync)",
        },
    )


if __name__ == "__main__":
    main()
