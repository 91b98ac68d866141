"""The instance handler: engine and replica *processes* inside instance managers.

An instance with `desireState: running` starts (starting → running) only while an instance manager
of its data engine is running on its node; it then reports that IM, an address and its image as
`currentImage`. A stopped instance reports no image (that is why a detached volume's replicas show an
empty currentImage). An instance whose IM stops running underneath it goes to `error` — the path by
which deleting a busy IM pod crashes engines and replicas (SIM-CRASH); one whose IM is `unknown`
(its node NotReady) is `unknown` instead, as Longhorn's instance handler has it, and `running` again
once the node is back. Faults requested through SimFaults (kill an engine, fail a replica) land
here too.
"""

from __future__ import annotations

import zlib

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.instance_managers import sync_instance_maps
from corral_sandbox.simulator.nulls import NULL
from corral_sandbox.simulator.objects import FINALIZER
from corral_sandbox.simulator.upgrade_signals import upgrading_nodes
from corral_sandbox.simulator.v2_engine import ALIVE, is_v2, rehome_initiator, step_v2_engine
from corral_sandbox.simulator.view import Obj, deleting, spec, status


def running_instance_managers(ctx: ReconcileContext) -> dict[tuple[str, str], Obj]:
    """(node, data engine) → the IM new instances start in, if it runs.

    v1: only the IM of the default instance-manager image (longhorn-manager's
    GetInstanceManagerByInstance lists v1 IMs by that image; creating an instance in one that is not
    running fails and is retried). So once a Longhorn upgrade changes the image, attaching volumes and
    a live upgrade's new replicas wait for the new IM pods to start (SIM-IM start delay, T1.5), while
    instances already running stay in the old IMs. v2: the default-image IM, else any running one.
    """
    default_image = ctx.view.setting("default-instance-manager-image")
    chosen: dict[tuple[str, str], Obj] = {}
    for im in ctx.view.all("instancemanager"):
        if status(im).get("currentState") != "running" or deleting(im):
            continue
        key = (spec(im).get("nodeID", ""), spec(im).get("dataEngine", "v1"))
        if key[1] == "v1" and default_image and spec(im).get("image") != default_image:
            continue
        held = chosen.get(key)
        if held is None or (
            spec(im).get("image") == default_image and spec(held).get("image") != default_image
        ):
            chosen[key] = im
    return chosen


def instance_port(name: str) -> int:
    return 10000 + zlib.crc32(name.encode()) % 20000


def reconcile_instances(ctx: ReconcileContext) -> None:
    managers = running_instance_managers(ctx)
    running_by_name = {
        im["metadata"]["name"]
        for im in ctx.view.all("instancemanager")
        if status(im).get("currentState") == "running" and not deleting(im)
    }
    upgrading = upgrading_nodes(ctx.view)
    for kind in ("replica", "engine"):
        for obj in ctx.view.all(kind):
            with ctx.isolated(kind, obj):
                _reconcile_instance(ctx, kind, obj, managers, running_by_name, upgrading)
    sync_instance_maps(ctx)  # the IMs' maps change in the round their instances do


def _reconcile_instance(
    ctx: ReconcileContext,
    kind: str,
    obj: Obj,
    managers: dict[tuple[str, str], Obj],
    running_managers: set[str],
    upgrading: set[str],
) -> None:
    name = obj["metadata"]["name"]
    ispec, istatus = spec(obj), status(obj)
    current = istatus.get("currentState") or "stopped"
    if deleting(obj):
        # the process is stopped as part of the deletion; then the finalizer goes
        finalizers = obj["metadata"].get("finalizers", [])
        if FINALIZER in finalizers:
            ctx.patch_metadata(
                kind, obj, {"finalizers": [f for f in finalizers if f != FINALIZER]}, f"{kind} deleted"
            )
        return
    if "conditions" not in istatus:
        # a new instance's conditions are a nil slice, which Longhorn's first status write sends as
        # null (the field is nullable); folded into the round's other status write of the object
        ctx.patch_status(kind, obj, {"conditions": NULL}, f"new {kind}")
    crash_set = ctx.memory.crash_engines if kind == "engine" else ctx.memory.fail_replicas
    if name in crash_set:
        if current in ("running", "starting", "suspended"):
            # kept until the error is seen: a refused write must not swallow the fault
            ctx.patch_status(kind, obj, {"currentState": "error"}, f"{kind} process killed (fault)")
            return
        crash_set.discard(name)  # seen dead (or there was no process to kill)
    im_name = istatus.get("instanceManagerName", "")
    v2_engine = kind == "engine" and is_v2(obj)
    if current in ("running", "starting", "suspended", "unknown") and im_name:
        if _node_down(ctx, im_name):
            _unknown(ctx, kind, obj, v2_engine)
            return
        if current == "unknown" and im_name in running_managers:
            # the node is back and its IM lists the process again: it kept running all along
            ctx.patch_status(kind, obj, {"currentState": "running"}, f"{kind} back with its node")
            return
    if (
        current in ("running", "starting", "suspended", "unknown")
        and im_name
        and im_name not in running_managers
    ):
        if v2_engine and current in ALIVE and ispec.get("nodeID", "") in upgrading:
            # §5.4: tolerated on an upgrading node; one asked to stop (a detach) is simply gone
            if (ispec.get("desireState") or "stopped") in ALIVE:
                rehome_initiator(ctx, obj, managers)
            else:
                ctx.patch_status(kind, obj, _stopped(kind, v2_engine), f"{kind} stopped with its IM")
            return
        ctx.patch_status(kind, obj, {"currentState": "error"}, f"{kind} lost its instance manager")
        return

    desire = ispec.get("desireState") or "stopped"
    if v2_engine and current in ALIVE and desire in ALIVE:
        step_v2_engine(ctx, obj, managers)
        return
    if "currentState" not in istatus and desire != "running":
        # a new instance reports itself stopped rather than saying nothing
        ctx.patch_status(kind, obj, {**_stopped(kind), "ownerID": ispec.get("nodeID", "")}, f"new {kind}")
        return
    if desire == "running":
        if current in ("error", "running"):
            # error: the volume controller decides what it means; running: the process stays in its
            # IM (checked running above), whatever the default IM image has become since
            return
        manager = managers.get((ispec.get("nodeID", ""), ispec.get("dataEngine", "v1")))
        if current == "starting" and im_name in running_managers:
            manager = ctx.view.get("instancemanager", im_name)  # the process was created there
        if manager is None:
            if current != "stopped":
                ctx.patch_status(kind, obj, _stopped(kind), f"{kind} has no running instance manager")
            return
        start = ctx.config.instance_start_seconds
        if kind == "replica" and ispec.get("active") is False:
            # the new replicas of a live upgrade take the first half of the upgrade
            start = ctx.config.live_upgrade_seconds / 2
        ip = status(manager).get("ip", "")
        if name in ctx.memory.held_instances:
            start = float("inf")  # held in `starting` until released (SimFaults.hold_instance)
        if ctx.waited(f"start/{kind}/{name}", start):
            wanted = {
                "currentState": "running",
                "currentImage": ispec.get("image", ""),
                "instanceManagerName": manager["metadata"]["name"],
                "ip": ip,
                "storageIP": ip,
                "port": instance_port(name),
                "started": True,
                "ownerID": ispec.get("nodeID", ""),
            }
            if kind == "engine":
                wanted["endpoint"] = f"/dev/longhorn/{ispec.get('volumeName', '')}"
            if v2_engine:
                # a v2 engine starts with its target beside its initiator
                wanted.update(targetIP=ip, currentTargetNodeIDForLiveUpgrade="")
            ctx.patch_status(kind, obj, wanted, f"{kind} started")
        elif current != "starting":
            ctx.patch_status(
                kind,
                obj,
                {"currentState": "starting", "instanceManagerName": manager["metadata"]["name"]},
                f"{kind} starting",
            )
        return
    asked = ctx.memory.stop_asked.pop(f"{kind}/{name}", None)
    if current != "stopped" and asked is not None:
        ctx.memory.timers.setdefault(f"stop/{kind}/{name}", min(asked, ctx.now))
    if current != "stopped" and ctx.waited(f"stop/{kind}/{name}", ctx.config.instance_stop_seconds):
        ctx.patch_status(kind, obj, _stopped(kind, v2_engine), f"{kind} stopped")


def _node_down(ctx: ReconcileContext, im_name: str) -> bool:
    """Its IM is `unknown`: its node is down or gone (§4.2 step 7)."""
    manager = ctx.view.get("instancemanager", im_name)
    return manager is not None and status(manager).get("currentState") == "unknown"


def _unknown(ctx: ReconcileContext, kind: str, obj: Obj, v2_engine: bool) -> None:
    """Longhorn's instance handler for an instance whose IM is `unknown`: a started process is
    `unknown` (it may well run on, out of reach), one never started is `stopped`. Not `error`:
    nothing is known to have failed, and the volume controller must not act as if it had."""
    if status(obj).get("started"):
        if status(obj).get("currentState") != "unknown":
            ctx.patch_status(kind, obj, {"currentState": "unknown"}, f"{kind} unknown: its node is down")
    elif status(obj).get("currentState") != "stopped":
        ctx.patch_status(kind, obj, _stopped(kind, v2_engine), f"{kind} never started; its node is down")


def _stopped(kind: str, v2_engine: bool = False) -> dict[str, object]:
    """A stopped instance's status as Longhorn writes it: a stopped Engine's per-replica maps are nil,
    which the API server keeps as literal nulls (nullable fields), and its endpoint is empty."""
    stopped: dict[str, object] = {
        "currentState": "stopped",
        "currentImage": "",
        "instanceManagerName": "",
        "ip": "",
        "storageIP": "",
        "port": 0,
        "started": False,
    }
    if kind == "engine":
        stopped["endpoint"] = ""
    if v2_engine:
        # a stopped v2 engine has no target anywhere
        stopped.update(
            targetIP="", currentTargetNodeIDForLiveUpgrade="", targetInstanceReplacementCreated=False
        )
    if kind == "engine":
        for field in ("replicaModeMap", "rebuildStatus", "backupStatus", "restoreStatus", "purgeStatus"):
            stopped[field] = NULL
    return stopped
