"""SIM-OFF and SIM-LIVE: the volume and engine controllers' side of an engine upgrade
(longhorn-behaviour.md §1.5).

* Offline (detached): engine and replicas take `volume.spec.image`, leftover live-upgrade replicas go,
  and `status.currentImage` follows — also the way a live upgrade that was cut by a detach ends.
* Live (attached, healthy, v1): one inactive replica per healthy replica on the new image → the
  engine on the new image (half of `live_upgrade_seconds` each) → swap: new replicas active, old
  ones deleted, `currentImage` = spec. A non-working image never gets past the engine switch.
* Rollback: `spec.image` set back to `currentImage` drops the inactive replicas and the engine's
  pending image.
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.objects import engine_image_name
from corral_sandbox.simulator.scope import VolumeScope, failed, running
from corral_sandbox.simulator.settings import as_bool
from corral_sandbox.simulator.view import Obj, spec, status

_REVISIONED = r".+-\d+\.\d+$"


def rollback_or_finish_offline(
    ctx: ReconcileContext, scope: VolumeScope, wanted: dict[str, Any], *, attached: bool = False
) -> bool:
    """Bring engine and replicas in line with the volume's image; True when nothing is left to do.

    Detached: re-image to `spec.image` (an offline upgrade, or the end of a cut live upgrade).
    Attached with spec == current: undo a live upgrade that never finished (a rollback).
    """
    assert scope.engine is not None
    volume, engine = scope.volume, scope.engine
    target = spec(volume).get("image", "") if not attached else wanted["currentImage"]
    v1 = scope.data_engine == "v1"
    stale_replicas = [r for r in scope.active() if v1 and spec(r).get("image") != target]
    pending = (
        spec(engine).get("image") != target
        or bool(scope.inactive())
        or bool(stale_replicas)
        or wanted["currentImage"] != target
        or bool(spec(engine).get("upgradedReplicaAddressMap"))
    )
    if not pending:
        return True
    if not attached and not ctx.waited(f"offline/{scope.name}/{target}", ctx.config.offline_upgrade_seconds):
        return False
    reason = "rollback of a live upgrade" if attached else "offline engine upgrade"
    for replica in scope.inactive():
        ctx.delete("replica", replica, reason)
    if any(spec(r).get("active", True) is False for r in scope.replicas):
        return False  # the live upgrade's replicas go first, so the volume never shows them after
    ctx.patch_spec("engine", engine, {"image": target, "upgradedReplicaAddressMap": {}}, reason)
    if not attached:
        for replica in stale_replicas:
            ctx.patch_spec("replica", replica, {"image": target}, reason)
        wanted["currentImage"] = target
    return True


def live_upgrade_allowed(ctx: ReconcileContext, scope: VolumeScope, old: str, new: str) -> bool:
    """checkOldAndNewEngineImagesForLiveUpgrade: both images ready on every node the volume uses,
    different git commits (or the same-commit setting with a revisioned tag), compatible controller API."""
    old_ei = ctx.view.get("engineimage", engine_image_name(old))
    new_ei = ctx.view.get("engineimage", engine_image_name(new))
    if old_ei is None or new_ei is None:
        return False
    nodes = {status(scope.volume).get("currentNodeID", "")} | {
        spec(r).get("nodeID", "") for r in scope.active() if spec(r).get("nodeID")
    }
    for ei in (old_ei, new_ei):
        deployment = status(ei).get("nodeDeploymentMap") or {}
        if status(ei).get("incompatible") or status(ei).get("state") not in ("deployed", "deploying"):
            return False
        if not all(deployment.get(n) for n in nodes if n):
            return False
    old_status, new_status = status(old_ei), status(new_ei)
    if old_status.get("gitCommit") == new_status.get("gitCommit"):
        import re

        tag = new.rsplit(":", 1)[1] if ":" in new.rsplit("/", 1)[-1] else ""
        same_commit_ok = as_bool(ctx.view.setting("allow-live-engine-upgrade-on-same-image-commit", "false"))
        if not (same_commit_ok and re.fullmatch(_REVISIONED, tag)):
            return False
    old_controller = int(old_status.get("controllerAPIVersion", 0))
    return old_controller <= int(new_status.get("controllerAPIVersion", 0)) and old_controller >= int(
        new_status.get("controllerAPIMinVersion", 0)
    )


def step_live_upgrade(
    ctx: ReconcileContext, scope: VolumeScope, robustness: str, wanted: dict[str, Any]
) -> None:
    assert scope.engine is not None
    volume, engine = scope.volume, scope.engine
    old, new = wanted["currentImage"], spec(volume).get("image", "")
    inactive = scope.inactive()
    if robustness != "healthy":
        if not inactive:
            return  # a degraded volume does not start a live upgrade
        # drop the first inactive replica that lost its active twin, then try to finish
        healthy_nodes = {spec(r).get("nodeID") for r in scope.active() if running(r) and not failed(r)}
        for replica in sorted(inactive, key=lambda r: r["metadata"]["name"]):
            if spec(replica).get("nodeID") not in healthy_nodes:
                ctx.delete("replica", replica, "degraded live upgrade: unmatched inactive replica")
                inactive = [r for r in inactive if r is not replica]
                break
    if not live_upgrade_allowed(ctx, scope, old, new):
        return
    for replica in inactive:
        if spec(replica).get("image") != new:
            ctx.delete("replica", replica, "live upgrade retargeted")
        elif failed(replica) or status(replica).get("currentState") == "error":
            ctx.delete("replica", replica, "live upgrade: new replica failed, make another")
    inactive = [
        r
        for r in inactive
        if spec(r).get("image") == new and not failed(r) and status(r).get("currentState") != "error"
    ]
    by_node = {spec(r).get("nodeID"): r for r in inactive}
    sources = [r for r in scope.active() if running(r) and not failed(r) and spec(r).get("healthyAt")]
    for source in sources:
        if spec(source).get("nodeID") not in by_node:
            name = f"{scope.name}-r-{ctx.new_suffix()}"
            twin = objects.replica(
                volume,
                ctx.namespace,
                name=name,
                node_id=spec(source).get("nodeID", ""),
                image=new,
                active=False,
                healthy_at=spec(source).get("healthyAt", ""),
                data_directory=spec(source).get("dataDirectoryName", ""),
            )
            twin["spec"]["desireState"] = "running"
            ctx.create("replica", twin, "live upgrade: new replica")
            by_node[spec(source).get("nodeID")] = twin
    matched = [by_node[spec(s).get("nodeID")] for s in sources]
    if not matched or not all(running(r) and status(r).get("currentImage") == new for r in matched):
        return
    upgraded = {r["metadata"]["name"]: _addr(r) for r in matched}
    if spec(engine).get("image") != new:
        ctx.patch_spec(
            "engine", engine, {"image": new, "upgradedReplicaAddressMap": upgraded}, "live upgrade: engine"
        )
        return
    if status(engine).get("currentImage") != new:
        return  # the engine controller is switching (forever, for a non-working image)
    previous = scope.active()
    for replica in matched:
        ctx.patch_spec("replica", replica, {"active": True}, "live upgrade: switch replicas")
    for replica in previous:
        ctx.delete("replica", replica, "live upgrade: old replica")
    ctx.patch_spec(
        "engine",
        engine,
        {"replicaAddressMap": upgraded, "upgradedReplicaAddressMap": {}},
        "live upgrade done",
    )
    ctx.patch_status(
        "engine",
        engine,
        {"replicaModeMap": dict.fromkeys(upgraded, "RW")},
        "live upgrade done",
    )
    wanted["currentImage"] = new


def switch_engine_image(ctx: ReconcileContext, scope: VolumeScope) -> None:
    """The engine controller: a running engine whose spec.image moved switches its binary."""
    engine = scope.engine
    assert engine is not None
    image = spec(engine).get("image", "")
    if not running(engine) or status(engine).get("currentImage") == image:
        return
    if not ctx.config.profile(image).working:
        ctx.waited(f"engine-upgrade/{engine['metadata']['name']}/{image}", float("inf"))
        return
    if ctx.waited(
        f"engine-upgrade/{engine['metadata']['name']}/{image}", ctx.config.live_upgrade_seconds / 2
    ):
        ctx.patch_status("engine", engine, {"currentImage": image}, "engine switched image")


def _addr(replica: Obj) -> str:
    return f"{status(replica).get('ip', '')}:{status(replica).get('port', 0)}"
