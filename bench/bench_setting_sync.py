"""Decision-only cost of the setting-sync decider at 10 k volumes and 1 k nodes (issue 13: <= 10 us
per event, no full scan per event). `python -m bench.bench_setting_sync` writes
bench/results/setting_sync.json.

The cluster: 1 000 nodes (Longhorn and Kubernetes Node objects) with an instance manager (its CR,
half of them running engine instances, and its pod) each, 200 share-manager and 100
backing-image-manager pods, the CSI plugin DaemonSet and the four CSI Deployments, 10 000 volumes
(half attached), every danger-zone Setting stored. `taint-toleration` was changed while volumes are
attached, so every component (1 305) lags it and the setting is pending: the case where a careless
decider would rescan components or volumes on every event. Events are made untimed in batches just
before they are applied, then each is applied and decided alone (`apply` + `decide`, timed with
perf_counter), as the runner would after a quiet debounce:

* attach/detach churn: a volume goes attached <-> detached (others stay attached: no flip);
* unrelated volume update: a volume's robustness / owner moves, its state does not;
* pod update: a component pod's status moves (restart count, phase), its spec does not;
* IM update: an instance manager's engine instances start or stop (group D's busy set moves).

Figures: p50 and mean per event (us, wall) for each kind and for the mix (`per_event_us_*`), each the
median of ROUNDS rounds (the machine is shared and its speed swings within seconds), the thread CPU
time per event, `calibration_empty_call_ns` as bench_engine_upgrade, and `apply_wave_ms`: the one
decision that issues every change when the last attached volume detaches; then, in the sandbox
with the whole stack, `applied_after_detach_ms` p50/p99 over 20 runs beside Longhorn's bound
(bench/applied_after_detach.py; `--decision-only` skips it), with the load average. Measures only.
"""

from __future__ import annotations

import asyncio
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import msgspec

from bench.applied_after_detach import measure
from bench.bench_engine_upgrade import calibration_ns, fixed_clock
from bench.report import scaled, write_report
from bench.versioned import VersionedCluster
from corral_dangerzone.table import DANGER_ZONE, SettingName
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.kinds import KINDS as KIND_TABLE
from corral_setting_sync.core import READS, SettingSyncDecider

NS = "longhorn-system"
VOLUMES = scaled(10_000, 300)
NODES = scaled(1_000, 30)
SHARE_MANAGERS = scaled(200, 10)
BACKING_IMAGE_MANAGERS = scaled(100, 5)
EVENTS = scaled(20_000, 1_000)
BATCH = 50
ROUNDS = scaled(5, 1)
KINDS = ("attach_detach", "volume_update", "pod_update", "im_update")
IM_CPU = "480m"  # 12 % (the default guaranteed IM CPU) of a 4-CPU node: no IM pod lags it


class Cluster(VersionedCluster):
    def __init__(self, seed: int = 13) -> None:
        super().__init__(seed, NS)
        self.volumes: dict[str, lh.Volume] = {}
        self.ims: dict[str, lh.InstanceManager] = {}

    def bootstrap(self) -> list[ObjectEvent[Any]]:
        events: list[ObjectEvent[Any]] = []
        for setting_name, row in DANGER_ZONE.items():
            value = "key1=value1:NoSchedule" if setting_name == "taint-toleration" else row.default
            setting = lh.Setting(
                metadata=lh.ObjectMeta(name=setting_name, namespace=NS),
                value=value,
                status=lh.SettingStatus(applied=True),
            )
            events.append(self.event("setting", setting))
        annotations = {"longhorn.io/last-applied-tolerations": "[]"}
        for ds in ("longhorn-csi-plugin", "engine-image-ei-12345678", "longhorn-manager"):
            template = lh.PodTemplate(
                metadata=lh.PodTemplateMeta(annotations=annotations),
                spec=lh.PodSpec(containers=(lh.Container(name=ds),)),
            )
            workload = lh.DaemonSet(
                metadata=lh.ObjectMeta(name=ds, namespace=NS), spec=lh.WorkloadSpec(template=template)
            )
            events.append(self.event("daemonset", workload))
        for dp in ("csi-attacher", "csi-provisioner", "csi-resizer", "csi-snapshotter", "longhorn-ui"):
            template = lh.PodTemplate(
                metadata=lh.PodTemplateMeta(annotations=annotations),
                spec=lh.PodSpec(containers=(lh.Container(name=dp),)),
            )
            deployment = lh.Deployment(
                metadata=lh.ObjectMeta(name=dp, namespace=NS), spec=lh.WorkloadSpec(template=template)
            )
            events.append(self.event("deployment", deployment))
        pods = [(f"instance-manager-{i:04d}", "instance-manager", i) for i in range(NODES)]
        pods += [(f"share-manager-pvc-{i:04d}", "share-manager", i) for i in range(SHARE_MANAGERS)]
        pods += [
            (f"backing-image-manager-{i:04d}", "backing-image-manager", i)
            for i in range(BACKING_IMAGE_MANAGERS)
        ]
        for i in range(NODES):
            node = f"node-{i:04d}"
            ready = (lh.Condition(type="Ready", status="True"),)
            events.append(
                self.event(
                    "node",
                    lh.Node(
                        metadata=lh.ObjectMeta(name=node, namespace=NS),
                        status=lh.NodeStatus(conditions=ready),
                    ),
                )
            )
            kube = lh.KubeNode(
                metadata=lh.ObjectMeta(name=node), status=lh.KubeNodeStatus(allocatable={"cpu": "4"})
            )
            events.append(self.event("kubenode", kube))
            im = lh.InstanceManager(
                metadata=lh.ObjectMeta(name=f"instance-manager-{i:04d}", namespace=NS, uid=f"uid-im-{i}"),
                spec=lh.InstanceManagerSpec(node_id=node, data_engine="v1"),
                status=lh.InstanceManagerStatus(
                    current_state="running", instance_engines=_engines(i % 2 == 1)
                ),
            )
            self.ims[im.metadata.name] = im
            events.append(self.event("instancemanager", im))
        for name, component, i in pods:
            resources = (
                lh.ResourceRequirements(requests={"cpu": IM_CPU})
                if component == "instance-manager"
                else lh.ResourceRequirements()
            )
            pod = lh.Pod(
                metadata=lh.ObjectMeta(
                    name=name,
                    namespace=NS,
                    uid=f"uid-{name}",
                    labels={"longhorn.io/component": component},
                    annotations=annotations,
                ),
                spec=lh.PodSpec(
                    node_name=f"node-{i % NODES:04d}",
                    containers=(lh.Container(name=component, resources=resources),),
                ),
                status=lh.PodStatus(phase="Running", container_statuses=(lh.ContainerStatus(ready=True),)),
            )
            self.pods[name] = pod
            events.append(self.event("pod", pod))
        for i in range(VOLUMES):
            name = f"pvc-{i:05d}"
            volume = lh.Volume(
                metadata=lh.ObjectMeta(name=name, namespace=NS, uid=f"uid-{name}"),
                spec=lh.VolumeSpec(number_of_replicas=3),
                status=lh.VolumeStatus(
                    state="attached" if i % 2 else "detached",
                    robustness="healthy" if i % 2 else "unknown",
                    owner_id=f"node-{i % NODES:04d}",
                ),
            )
            self.volumes[name] = volume
            events.append(self.event("volume", volume))
        for kind in sorted(READS):
            namespace = NS if KIND_TABLE[kind].namespaced else ""
            events.append(ObjectEvent(type=EventType.RESYNCED, kind=kind, namespace=namespace, name=""))
        return events

    def set_volume(self, name: str, **status: Any) -> ObjectEvent[Any]:
        volume = self.volumes[name]
        volume = self.volumes[name] = msgspec.structs.replace(
            volume, status=msgspec.structs.replace(volume.status, **status)
        )
        return self.event("volume", volume)

    def attach_detach(self) -> ObjectEvent[Any]:
        # Even-numbered volumes flip; the odd ones stay attached, so the precondition never holds.
        name = f"pvc-{self.rng.randrange(0, VOLUMES, 2):05d}"
        attached = self.volumes[name].status.state == "attached"
        return self.set_volume(name, state="detached" if attached else "attached")

    def im_update(self) -> ObjectEvent[Any]:
        """An instance manager's engine instances start or stop (the busy set moves, group D's
        precondition does not: half of them always run some)."""
        name = f"instance-manager-{self.rng.randrange(0, NODES, 2):04d}"
        im = self.ims[name]
        status = msgspec.structs.replace(im.status, instance_engines=_engines(not im.status.instance_engines))
        im = self.ims[name] = msgspec.structs.replace(im, status=status)
        return self.event("instancemanager", im)

    def volume_update(self) -> ObjectEvent[Any]:
        name = f"pvc-{self.rng.randrange(VOLUMES):05d}"
        volume = self.volumes[name]
        robustness = "degraded" if volume.status.robustness == "healthy" else "healthy"
        return self.set_volume(name, robustness=robustness, owner_id=f"node-{self.rng.randrange(NODES):04d}")


def _engines(running: bool) -> dict[str, lh.InstanceProcess]:
    return {"e-1": lh.InstanceProcess(status=lh.InstanceProcessStatus(state="running"))} if running else {}


def timed_stream(
    decider: SettingSyncDecider, make: Callable[[], ObjectEvent[Any]], count: int
) -> tuple[list[float], list[float]]:
    """`count` events, made untimed in batches just before they are applied, each applied and
    decided alone: the wall time of each, and the thread CPU time per event of each batch."""
    perf, apply, decide = time.perf_counter, decider.apply, decider.decide
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(count // BATCH):
        batch = [make() for _ in range(BATCH)]
        cpu = time.thread_time()
        for event in batch:
            start = perf()
            apply(event)
            decide()
            walls.append(perf() - start)
        cpus.append((time.thread_time() - cpu) / BATCH)
    return walls, cpus


def main() -> None:
    calibration_before = calibration_ns()
    cluster = Cluster()
    decider = SettingSyncDecider(fixed_clock())
    start = time.perf_counter()
    for event in cluster.bootstrap():
        decider.apply(event)
    first = decider.decide()
    bootstrap_ms = (time.perf_counter() - start) * 1000
    lagging = len(decider.lagging[SettingName.TAINT_TOLERATION])
    gc.collect()
    gc.freeze()  # the bootstrapped view is long-lived: keep the collector off it, as a service would

    makers = {kind: getattr(cluster, kind) for kind in KINDS}
    rounds: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in (*KINDS, "mix")}
    calibrations: list[float] = []
    per_kind = EVENTS // len(KINDS) // ROUNDS
    for _ in range(ROUNDS):
        mix_walls: list[float] = []
        mix_cpus: list[float] = []
        for kind, make in makers.items():
            walls, cpus = timed_stream(decider, make, per_kind)
            rounds[kind].append((statistics.median(walls), statistics.fmean(walls), statistics.fmean(cpus)))
            mix_walls += walls
            mix_cpus += cpus
        rounds["mix"].append(
            (statistics.median(mix_walls), statistics.fmean(mix_walls), statistics.fmean(mix_cpus))
        )
        calibrations.append(calibration_ns())
    assert decider.verdicts["taint-toleration"].reason == "attached-volumes"

    # The wave: every attached volume but one detaches (untimed), then the last one, timed.
    attached = [name for name, v in cluster.volumes.items() if v.status.state != "detached"]
    for name in attached[:-1]:
        decider.apply(cluster.set_volume(name, state="detached"))
        decider.decide()
    last = cluster.set_volume(attached[-1], state="detached")
    start = time.perf_counter()
    decider.apply(last)
    wave = decider.decide()
    wave_ms = (time.perf_counter() - start) * 1000
    gc.unfreeze()

    def median_of(kind: str, index: int) -> float:
        return round(statistics.median(r[index] for r in rounds[kind]) * 1e6, 2)

    figures: dict[str, Any] = {
        "volumes": VOLUMES,
        "nodes": NODES,
        "components": len(decider.components),
        "components_lagging": lagging,
        "bootstrap_ms": round(bootstrap_ms, 1),
        "bootstrap_commands": len(first),
        "events": per_kind * len(KINDS) * ROUNDS,
        "per_event_us_p50": median_of("mix", 0),
        "per_event_us_mean": median_of("mix", 1),
        "per_event_cpu_us": median_of("mix", 2),
        **{f"{kind}_us_p50": median_of(kind, 0) for kind in KINDS},
        **{f"{kind}_us_mean": median_of(kind, 1) for kind in KINDS},
        "per_event_us_mean_rounds": [round(r[1] * 1e6, 2) for r in rounds["mix"]],
        "calibration_empty_call_ns": round(statistics.median(calibrations), 1),
        "calibration_empty_call_ns_before": round(calibration_before, 1),
        "per_event_in_empty_calls": round(
            statistics.median(r[1] for r in rounds["mix"]) * 1e9 / statistics.median(calibrations), 1
        ),
        "apply_wave_ms": round(wave_ms, 2),
        "apply_wave_commands": len(wave),
    }
    figures["load_average_1m"] = round(os.getloadavg()[0], 2)
    if "--decision-only" not in sys.argv:
        figures.update(asyncio.run(measure()))
    figures["calibration_empty_call_ns_after"] = round(calibration_ns(), 1)
    write_report(
        "setting_sync",
        figures,
        floors={
            "per_event_us_mean": "<= 10 at 10k volumes / 1k nodes (decision only), no full scan per event",
            "applied_after_detach_ms_p99": "<= 2000 in the sandbox (Longhorn: up to the hourly resync)",
            "apply_wave_ms": "reported (the one decision issuing every change after the last detach)",
        },
    )


if __name__ == "__main__":
    main()
