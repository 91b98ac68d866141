"""One reconcile round of every simulated Longhorn controller, as a pure function of what is observed.

`reconcile(view, memory, config, now, stamp, rng, paused)` → the writes to make, plus the earliest
simulated time at which a waiting controller wants to look again. No I/O: unit tests drive it with a
hand-built view, the runner with the view kept by list+watch.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection
from dataclasses import dataclass

from corral_sandbox.simulator.component_pods import reconcile_component_pods
from corral_sandbox.simulator.config import SimConfig
from corral_sandbox.simulator.context import Memory, ReconcileContext
from corral_sandbox.simulator.default_settings import reconcile_default_settings
from corral_sandbox.simulator.engine_images import reconcile_engine_images
from corral_sandbox.simulator.instance_managers import reconcile_instance_managers
from corral_sandbox.simulator.instances import reconcile_instances
from corral_sandbox.simulator.io_ledger import observe_io
from corral_sandbox.simulator.kube_pods import reconcile_kube_pods
from corral_sandbox.simulator.rollouts import reconcile_rollouts
from corral_sandbox.simulator.snapshots import reconcile_snapshots
from corral_sandbox.simulator.upgrade_signals import reconcile_node_upgrade_signals
from corral_sandbox.simulator.view import ClusterView
from corral_sandbox.simulator.volume_attachments import reconcile_volume_attachments
from corral_sandbox.simulator.volumes import reconcile_volumes
from corral_sandbox.simulator.workloads import reconcile_workloads
from corral_sandbox.simulator.writes import Write

# The simulated controllers, in the order a round runs them. Names are what SimFaults.stall() takes.
CONTROLLERS: dict[str, Callable[[ReconcileContext], None]] = {
    # SIM-V2: the node controller's DataEngineUpgradeRequested, which the others below read
    "node": reconcile_node_upgrade_signals,
    "engineimage": reconcile_engine_images,
    "instancemanager": reconcile_instance_managers,
    "instance": reconcile_instances,
    "volume": reconcile_volumes,
    "snapshot": reconcile_snapshots,
    # SIM-K8S (off with SimConfig.kube_workloads=False)
    "defaultsetting": reconcile_default_settings,
    "volumeattachment": reconcile_volume_attachments,
    "workload": reconcile_workloads,
    "rollout": reconcile_rollouts,
    "componentpod": reconcile_component_pods,
    "kubepod": reconcile_kube_pods,
}


@dataclass(frozen=True)
class RoundResult:
    writes: list[Write]
    next_deadline: float | None
    errors: tuple[str, ...] = ()


def reconcile(
    view: ClusterView,
    memory: Memory,
    config: SimConfig,
    now: float,
    stamp: str,
    rng: random.Random,
    paused: Collection[str] = (),
) -> RoundResult:
    ctx = ReconcileContext(view=view, memory=memory, config=config, now=now, stamp=stamp, rng=rng)
    for name, controller in CONTROLLERS.items():
        if name in paused:
            # a stalled controller keeps its timers: it resumes where it stopped
            ctx.touched.update(k for k in memory.timers if _owned_by(name, k))
            continue
        controller(ctx)
    ctx.forget_untouched_timers()
    # SIM-IO is an observer, not a controller: it records even while every controller is stalled
    observe_io(ctx)
    return RoundResult(coalesce(ctx.writes), ctx.next_deadline(), tuple(ctx.errors))


_TIMER_OWNERS = {
    "engineimage": ("ei-",),
    "instancemanager": ("im-start/",),
    "node": (),
    "instance": ("start/", "stop/", "v2-"),
    "snapshot": ("snapshot/",),
    "volume": ("offline/", "engine-upgrade/", "rebuild/", "stale/", "expand/", "restore/", "migrate/"),
    "defaultsetting": ("default-setting/",),
    "volumeattachment": (),
    "workload": (),
    "rollout": (),
    "componentpod": (),
    "kubepod": ("pod-start/",),
}


def _owned_by(controller: str, key: str) -> bool:
    return key.startswith(_TIMER_OWNERS[controller])


def coalesce(writes: list[Write]) -> list[Write]:
    """Fold several merge patches of one object (same verb) into one, at its first position."""
    result: list[Write] = []
    index: dict[tuple[str, str, str], int] = {}
    for write in writes:
        key = (write.verb, write.kind, write.name)
        if write.verb in ("patch", "status") and key in index:
            held = result[index[key]]
            body = _deep_merge(dict(held.body or {}), write.body or {})
            result[index[key]] = Write(
                held.verb,
                held.kind,
                held.name,
                body,
                f"{held.reason}; {write.reason}",
                observed=held.observed,
            )
            continue
        if write.verb in ("create", "delete"):
            # a create or delete orders the object's later patches after it
            index = {k: v for k, v in index.items() if k[1:] != (write.kind, write.name)}
        else:
            index[key] = len(result)
        result.append(write)
    return result


def _deep_merge(base: dict[str, object], patch: dict[str, object]) -> dict[str, object]:
    for key, value in patch.items():
        held = base.get(key)
        if isinstance(value, dict) and isinstance(held, dict):
            base[key] = _deep_merge(dict(held), value)
        else:
            base[key] = value
    return base
