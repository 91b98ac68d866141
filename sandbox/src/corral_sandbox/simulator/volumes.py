"""SIM-VOL: the volume controller — engine and replica creation, replica placement and replenishment,
attach/detach, robustness, owner node, standby/restore, expansion, migration and deletion.

One volume at a time, level-triggered: everything is recomputed from the volume, its engine and its
replicas as observed. Engine upgrades (offline, live, rollback) are delegated to upgrade.py and
per-replica rebuild / mode bookkeeping to rebuild.py; this module decides *when* they run.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.objects import FINALIZER
from corral_sandbox.simulator.rebuild import engine_modes, mark_failed_replicas
from corral_sandbox.simulator.scope import ClusterFacts, VolumeScope, alive, failed, running
from corral_sandbox.simulator.switchover import step_switchover
from corral_sandbox.simulator.upgrade import (
    finish_offline,
    settle_attached,
    step_live_upgrade,
    switch_engine_image,
)
from corral_sandbox.simulator.view import Obj, deleting, spec, status

_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def parse_size(value: Any) -> int:
    """A volume size (`1073741824`, `1Gi`, `5G`) in bytes; 0 when it cannot be read."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]i?|k)?\s*", str(value or ""))
    if not match:
        return 0
    return int(match.group(1)) * _UNITS.get(match.group(2) or "", 1)


def reconcile_volumes(ctx: ReconcileContext) -> None:
    facts = ClusterFacts.gather(ctx)
    volumes = {v["metadata"]["name"] for v in ctx.view.all("volume")}
    for volume in ctx.view.all("volume"):
        name = volume["metadata"]["name"]
        engines = facts.engines_by_volume.get(name, [])
        scope = VolumeScope(volume, engines[0] if engines else None, facts.replicas_by_volume.get(name, []))
        with ctx.isolated("volume", volume):
            _reconcile_volume(ctx, facts, scope)
    # engines and replicas whose volume is gone are orphans: Longhorn removes them
    for kind in ("engine", "replica"):
        for obj in ctx.view.all(kind):
            if spec(obj).get("volumeName") not in volumes and not deleting(obj):
                ctx.delete(kind, obj, "orphaned: its volume is gone")


def _reconcile_volume(ctx: ReconcileContext, facts: ClusterFacts, scope: VolumeScope) -> None:
    volume = scope.volume
    vspec, vstatus = spec(volume), status(volume)
    if deleting(volume):
        _delete_volume(ctx, scope)
        return
    finalizers = volume["metadata"].get("finalizers", [])
    if FINALIZER not in finalizers:
        ctx.patch_metadata("volume", volume, {"finalizers": [*finalizers, FINALIZER]}, "adopt volume")

    wanted: dict[str, Any] = {}
    current_image = vstatus.get("currentImage") or vspec.get("image", "")
    wanted["currentImage"] = current_image
    state = vstatus.get("state") or "detached"
    if state == "creating":
        state = "detached"

    if scope.engine is None:
        # the engine starts on the image the volume runs (not changed locally: only writes change the view)
        shown = {**volume, "status": {**status(volume), "currentImage": current_image}}
        ctx.create("engine", objects.engine(shown, ctx.namespace), "volume needs an engine")
        wanted.update(state=state, robustness="unknown", ownerID=_owner(ctx, facts, volume, ""))
        ctx.patch_status("volume", volume, wanted, "volume created")
        return
    engine = scope.engine

    _standby_and_restore(ctx, scope, wanted)
    _expansion(ctx, scope, wanted)
    crashed = status(engine).get("currentState") == "error" and state in ("attached", "attaching")
    if not crashed:
        mark_failed_replicas(ctx, scope, state)
    # a detached volume's new replicas take the image it is about to run (an offline upgrade may be
    # pending); an attached one's take the image its engine runs — ahead of currentImage between a
    # live upgrade's swap and the volume reporting it, so nothing made then is on the old image
    serving = (status(engine).get("currentImage") if running(engine) else "") or current_image
    if not (scope.data_engine == "v2" and status(volume).get("ownerID", "") in facts.upgrading):
        # §5.4: a v2 volume owned by a node whose data engine is being upgraded is not replenished
        _replenish(ctx, facts, scope, vspec.get("image", "") if state == "detached" else serving)

    want_node = vspec.get("nodeID", "")
    upgrading = vspec.get("image", "") != current_image
    if crashed:
        # SIM-CRASH: the engine died; Longhorn detaches, then reattaches because spec.nodeID still asks
        state = "detaching"
        wanted["remountRequestedAt"] = ctx.stamp
    elif state == "detached":
        if not finish_offline(ctx, scope, wanted):
            pass  # still re-imaging; attach afterwards
        elif want_node:
            state = "attaching"
    elif state == "attaching":
        if not want_node:
            state = "detaching"
        elif alive(engine) and spec(engine).get("nodeID") == want_node:
            state = "attached"
            wanted["currentNodeID"] = want_node
    elif state == "attached" and want_node != vstatus.get("currentNodeID", ""):
        state = "detaching"
    elif state == "attached" and status(engine).get("currentState") == "unknown":
        pass  # its node is down: Longhorn keeps the volume attached, robustness unknown, and waits
    elif state == "attached" and not alive(engine):
        # the status says attached but the engine is not serving: a crash whose detach was not
        # recorded (the status write was refused, and the engine stopped meanwhile). Go the crash's
        # way — detach, finish any upgrade offline, reattach — rather than restart it where it was.
        state = "detaching"
        wanted["remountRequestedAt"] = ctx.stamp
    if state == "detaching" and _all_stopped(scope):
        state = "detached"
        wanted["currentNodeID"] = ""

    if state in ("attaching", "attached") and scope.data_engine == "v1" and not scope.inactive():
        # a stopped replica starts on the image the volume runs, whatever it was made with
        for replica in scope.active():
            if not running(replica) and spec(replica).get("image") != serving:
                ctx.patch_spec("replica", replica, {"image": serving}, "replica follows volume")
    _drive_instances(ctx, scope, state, want_node)
    modes = engine_modes(ctx, facts, scope) if state == "attached" and running(engine) else {}
    robustness = _robustness(scope, state, modes)
    if state == "attached" and status(engine).get("currentState") == "suspended":
        # a suspended v2 engine reports no replica modes: the robustness it had still holds
        robustness = vstatus.get("robustness") or robustness
    if state == "attached" and scope.data_engine == "v2" and alive(engine):
        step_switchover(ctx, scope, wanted)
        if not upgrading and running(engine):
            settle_attached(ctx, scope, wanted)
    elif state == "attached" and running(engine):
        if upgrading and vspec.get("dataEngine", "v1") == "v1":
            step_live_upgrade(ctx, scope, robustness, wanted)
        elif not upgrading:
            settle_attached(ctx, scope, wanted)
        switch_engine_image(ctx, scope)
    _migration(ctx, scope, state, wanted)
    if state == "detached" and status(volume).get("currentTargetNodeIDForLiveUpgrade"):
        wanted["currentTargetNodeIDForLiveUpgrade"] = ""  # a detached v2 volume has no target anywhere
    wanted["state"] = state
    wanted["robustness"] = robustness
    wanted["ownerID"] = _owner(
        ctx, facts, volume, wanted.get("currentNodeID", vstatus.get("currentNodeID", ""))
    )
    ctx.patch_status("volume", volume, wanted, f"volume {state}")
    ctx.patch_status("engine", engine, {"ownerID": wanted["ownerID"]}, "engine follows its volume owner")


def _delete_volume(ctx: ReconcileContext, scope: VolumeScope) -> None:
    ctx.patch_status("volume", scope.volume, {"state": "deleting"}, "volume deleting")
    leftovers = [o for o in [scope.engine, *scope.replicas] if o is not None]
    for obj in leftovers:
        if not deleting(obj):
            kind = "engine" if obj is scope.engine else "replica"
            ctx.delete(kind, obj, "volume deleted: cleaning up")
    if not leftovers:
        finalizers = scope.volume["metadata"].get("finalizers", [])
        ctx.patch_metadata(
            "volume",
            scope.volume,
            {"finalizers": [f for f in finalizers if f != FINALIZER]},
            "volume cleaned up",
        )


def _standby_and_restore(ctx: ReconcileContext, scope: VolumeScope, wanted: dict[str, Any]) -> None:
    vspec, vstatus = spec(scope.volume), status(scope.volume)
    wanted["isStandby"] = bool(vspec.get("Standby"))  # sic: Longhorn's json tag
    restoring = bool(vspec.get("Standby") or vspec.get("fromBackup"))
    if not restoring or vstatus.get("restoreRequired") is False:
        wanted["restoreRequired"] = False
        return
    done = ctx.waited(f"restore/{scope.name}", ctx.config.restore_seconds)
    wanted["restoreRequired"] = not done
    wanted["restoreInitiated"] = True


def _expansion(ctx: ReconcileContext, scope: VolumeScope, wanted: dict[str, Any]) -> None:
    assert scope.engine is not None
    size = parse_size(spec(scope.volume).get("size"))
    current = parse_size(status(scope.engine).get("currentSize")) or parse_size(
        spec(scope.engine).get("volumeSize")
    )
    if size and current and size > current:
        wanted["expansionRequired"] = True
        if ctx.waited(f"expand/{scope.name}", ctx.config.expansion_seconds):
            ctx.patch_spec("engine", scope.engine, {"volumeSize": str(size)}, "expansion done")
            ctx.patch_status("engine", scope.engine, {"currentSize": str(size)}, "expansion done")
            wanted["expansionRequired"] = False
        return
    wanted["expansionRequired"] = False
    if size and not status(scope.engine).get("currentSize"):
        ctx.patch_status("engine", scope.engine, {"currentSize": str(current or size)}, "engine size")
    # the size reached lives on the Engine (`status.currentSize`): a Volume's status has no such key
    wanted["currentSize"] = None


def _replenish(ctx: ReconcileContext, facts: ClusterFacts, scope: VolumeScope, image: str) -> None:
    """Keep `numberOfReplicas` usable replicas: place unscheduled ones, create missing ones.

    Not while a live upgrade has its new replicas out (the upgrade owns the replica set then), but
    still while one is only requested: a degraded volume does not start a live upgrade, so holding
    the rebuild back until then would leave it stuck. New replicas take the image the engine runs.
    Extra healthy replicas are kept (Longhorn does not trim them); extra unscheduled ones go first.
    """
    if any(spec(r).get("active", True) is False for r in scope.replicas):
        return
    wanted = int(spec(scope.volume).get("numberOfReplicas", 3) or 0)
    usable = [r for r in scope.active() if not failed(r)]
    taken = {str(spec(r)["nodeID"]) for r in usable if spec(r).get("nodeID")}
    v2 = scope.data_engine == "v2"
    for replica in [r for r in usable if not spec(r).get("nodeID")]:
        if len(usable) > wanted:
            ctx.delete("replica", replica, "replica count lowered: unscheduled replica dropped")
            usable.remove(replica)
            continue
        node = _place(facts, taken, v2=v2)
        if node:
            taken.add(node)
            facts.replicas_per_node[node] += 1
            ctx.patch_spec("replica", replica, {"nodeID": node}, "replica scheduled")
    for _ in range(wanted - len(usable)):
        node = _place(facts, taken, v2=v2)
        if node:
            taken.add(node)
            facts.replicas_per_node[node] += 1
        name = f"{scope.name}-r-{ctx.new_suffix()}"
        replica = objects.replica(scope.volume, ctx.namespace, name=name, node_id=node, image=image)
        ctx.create("replica", replica, "replenish replica" if node else "replica cannot be scheduled")


def _place(facts: ClusterFacts, taken: set[str], *, v2: bool = False) -> str:
    """Least-loaded schedulable node without a replica of this volume (hard anti-affinity). A v2
    replica also skips nodes whose data engine is being upgraded (§5.4, the scheduler filter as
    intended: the prototype's inverted one schedules v2 replicas nowhere) or where v2 is disabled."""
    skip = facts.upgrading | facts.v2_disabled if v2 else set()
    candidates = [n for n in facts.schedulable if n not in taken and n not in skip]
    if not candidates:
        return ""
    return min(candidates, key=lambda n: (facts.replicas_per_node[n], n))


def _all_stopped(scope: VolumeScope) -> bool:
    objs = [o for o in [scope.engine, *scope.live()] if o is not None]
    return all((status(o).get("currentState") or "stopped") == "stopped" for o in objs)


def _drive_instances(ctx: ReconcileContext, scope: VolumeScope, state: str, want_node: str) -> None:
    """Desired process states for the volume's state: replicas first, then the engine."""
    assert scope.engine is not None
    if state in ("detaching", "detached"):
        for obj, kind in [(scope.engine, "engine")] + [(r, "replica") for r in scope.live()]:
            if spec(obj).get("desireState") != "stopped":
                ctx.patch_spec(kind, obj, {"desireState": "stopped"}, f"volume {state}")
        if state == "detached" and spec(scope.engine).get("nodeID"):
            ctx.patch_spec("engine", scope.engine, {"nodeID": "", "replicaAddressMap": {}}, "volume detached")
        return
    startable = [r for r in scope.live() if spec(r).get("nodeID") and not failed(r)]
    for replica in startable:
        if spec(replica).get("desireState") != "running":
            ctx.patch_spec("replica", replica, {"desireState": "running"}, "volume attaching")
    active = [r for r in startable if spec(r).get("active", True) is not False]
    if state == "attaching":
        ready = active and all(running(r) for r in active)
        if ready or spec(scope.engine).get("desireState") == "running":
            addresses = {r["metadata"]["name"]: _addr(r) for r in active if running(r)}
            ctx.patch_spec(
                "engine",
                scope.engine,
                {"nodeID": want_node, "desireState": "running", "replicaAddressMap": addresses},
                "volume attaching",
            )


def _addr(replica: Obj) -> str:
    return f"{status(replica).get('ip', '')}:{status(replica).get('port', 0)}"


def _robustness(scope: VolumeScope, state: str, modes: dict[str, str]) -> str:
    engine = scope.engine
    if state == "attached" and engine is not None and status(engine).get("currentState") == "unknown":
        return "unknown"
    if state != "attached":
        usable = [r for r in scope.active() if not failed(r)]
        return "faulted" if scope.active() and not usable else "unknown"
    wanted = int(spec(scope.volume).get("numberOfReplicas", 3) or 0)
    rw = sum(1 for mode in modes.values() if mode == "RW")
    if rw == 0:
        return "faulted"
    return "healthy" if rw >= wanted else "degraded"


def _migration(ctx: ReconcileContext, scope: VolumeScope, state: str, wanted: dict[str, Any]) -> None:
    target = spec(scope.volume).get("migrationNodeID", "")
    if not target or state != "attached":
        wanted["currentMigrationNodeID"] = ""
        return
    if ctx.waited(f"migrate/{scope.name}/{target}", ctx.config.migration_seconds):
        wanted["currentMigrationNodeID"] = target


def _owner(ctx: ReconcileContext, facts: ClusterFacts, volume: Obj, attached_node: str) -> str:
    """The owner node: the attached node, else the current owner while it is ready, else a
    deterministic ready node (so a test can set `status.ownerID` on a detached volume and keep it)."""
    if attached_node:
        return attached_node
    owner = str(status(volume).get("ownerID", ""))
    if owner in facts.ready:
        return owner
    if not facts.ready:
        return owner
    return facts.ready[zlib.crc32(volume["metadata"]["name"].encode()) % len(facts.ready)]
