"""SIM-OFF and SIM-LIVE: the volume and engine controllers' side of an engine upgrade
(longhorn-behaviour.md §1.5).

* Offline (detached): engine and replicas take `volume.spec.image`, leftover live-upgrade replicas go,
  and `status.currentImage` follows — also the way a live upgrade that was cut by a detach ends.
* Live (attached, healthy, v1): one inactive replica per healthy replica on the new image, on the
  same data path → the engine on the new image (half of `live_upgrade_seconds` each) → swap: new
  replicas active, old ones deleted → `currentImage` = spec. A non-working image never gets past the
  engine switch, nor does a "bad image" on the volumes it stalls on (config.ImageProfile.stalls).
* Rollback: `spec.image` set back to `currentImage` drops the inactive replicas and the engine's
  pending image.

Every step is derived from the objects as observed, never from what an earlier round meant to do, as
Longhorn's controllers are: an API server that refuses some writes (409/429/500) only delays an
upgrade. A new replica is matched to its old one by data path (node + data directory, Longhorn's
`dataPathToNewReplica`), so a replica already made — or already switched active — is never made
twice; the engine's phase (its `spec.image`) says whether replicas are still being prepared or are
being swapped; and `currentImage` is written only in a round that finds the engine and every replica
already on the image, so it never runs ahead of writes that were lost.
"""

from __future__ import annotations

import re
from typing import Any

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.objects import engine_image_name
from corral_sandbox.simulator.scope import VolumeScope, failed, running
from corral_sandbox.simulator.settings import as_bool
from corral_sandbox.simulator.view import Obj, spec, status

_REVISIONED = r".+-\d+\.\d+$"


def data_path(replica: Obj) -> tuple[str, str]:
    """Where a replica's data lives: a live upgrade's new replica shares it with the old one."""
    rspec = spec(replica)
    name = str(replica["metadata"]["name"])
    return str(rspec.get("nodeID", "")), str(rspec.get("dataDirectoryName") or name)


def is_active(replica: Obj) -> bool:
    return spec(replica).get("active", True) is not False


def broken(replica: Obj) -> bool:
    return failed(replica) or status(replica).get("currentState") == "error"


def finish_offline(ctx: ReconcileContext, scope: VolumeScope, wanted: dict[str, Any]) -> bool:
    """Detached: re-image engine and replicas to `spec.image` (an offline upgrade, or the end of a live
    upgrade cut by a detach). True once the observed engine and replicas are all on it; only then does
    `currentImage` follow."""
    assert scope.engine is not None
    volume, engine = scope.volume, scope.engine
    target = spec(volume).get("image", "")
    v1 = scope.data_engine == "v1"
    inactive = scope.inactive()
    stale = [r for r in scope.active() if v1 and spec(r).get("image") != target]
    engine_behind = spec(engine).get("image") != target or bool(spec(engine).get("upgradedReplicaAddressMap"))
    if not (inactive or stale or engine_behind):
        wanted["currentImage"] = target
        return True
    if not ctx.waited(f"offline/{scope.name}/{target}", ctx.config.offline_upgrade_seconds):
        return False
    reason = "offline engine upgrade"
    for replica in inactive:
        ctx.delete("replica", replica, reason)
    if any(not is_active(r) for r in scope.replicas):
        return False  # the live upgrade's replicas go first, so the volume never shows them after
    ctx.patch_spec("engine", engine, {"image": target, "upgradedReplicaAddressMap": {}}, reason)
    # a half-swapped live upgrade can leave two active replicas on one data path: keep the one on
    # the target image rather than re-imaging both
    on_target = {data_path(r) for r in scope.active() if spec(r).get("image") == target}
    for replica in stale:
        if data_path(replica) in on_target:
            ctx.delete("replica", replica, f"{reason}: its data path already has a replica on the image")
        else:
            ctx.patch_spec("replica", replica, {"image": target}, reason)
    return False


def settle_attached(ctx: ReconcileContext, scope: VolumeScope, wanted: dict[str, Any]) -> None:
    """Attached with `spec.image == currentImage`: bring engine and replicas onto that image.

    A rollback (spec.image set back while a live upgrade was under way): the new replicas go, then the
    engine goes back. Replicas that still do not follow once the engine runs the image (a swap some of
    whose writes were lost, a replica left on an older image) are replaced through the same twin-and-
    swap as a live upgrade, so they cannot stay on the old image.
    """
    engine = scope.engine
    assert engine is not None
    target = wanted["currentImage"]
    reason = "rollback of a live upgrade"
    if scope.data_engine == "v1":
        leftovers = [r for r in scope.inactive() if spec(r).get("image") != target]
        for replica in leftovers:
            ctx.delete("replica", replica, reason)
        if leftovers:
            return  # the live upgrade's replicas go first, so the volume never shows them after
    if spec(engine).get("image") != target:
        ctx.patch_spec("engine", engine, {"image": target, "upgradedReplicaAddressMap": {}}, reason)
        return
    if scope.data_engine != "v1" or status(engine).get("currentImage") != target:
        return  # v2 replicas carry no image; or the engine is still switching back
    behind = [r for r in scope.active() if spec(r).get("image") != target]
    if not behind and not scope.inactive():
        ctx.patch_spec("engine", engine, {"upgradedReplicaAddressMap": {}}, "engine upgrade settled")
        return
    if make_twins(ctx, scope, target, "replica follows the engine image") is not None:
        swap_replicas(ctx, scope, target)  # no replica left to twin, or every twin runs


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
    """One look at an attached v1 volume whose `spec.image` differs from `currentImage`.

    The engine's `spec.image` is the phase: not yet the new image → prepare the new replicas and, once
    they all run, point the engine at them (one write, image and replica map together); the new image
    → once the engine runs it, swap the replicas and, when the swap is seen complete, report it.
    """
    engine = scope.engine
    assert engine is not None
    old, new = wanted["currentImage"], spec(scope.volume).get("image", "")
    if spec(engine).get("image") == new:
        if status(engine).get("currentImage") != new:
            return  # the engine controller is switching (forever, for a non-working image)
        if swap_replicas(ctx, scope, new):
            wanted["currentImage"] = new
        return
    inactive = scope.inactive()
    if robustness != "healthy":
        if not inactive:
            return  # a degraded volume does not start a live upgrade
        # drop the first inactive replica that lost its active twin, then try to finish
        healthy = {data_path(r) for r in scope.active() if running(r) and not failed(r)}
        for replica in sorted(inactive, key=lambda r: r["metadata"]["name"]):
            if data_path(replica) not in healthy:
                ctx.delete("replica", replica, "degraded live upgrade: unmatched inactive replica")
                return
    if not live_upgrade_allowed(ctx, scope, old, new):
        return
    retargeted = [r for r in inactive if spec(r).get("image") != new]
    for replica in retargeted:
        ctx.delete("replica", replica, "live upgrade retargeted")
    if retargeted:
        return
    twins = make_twins(ctx, scope, new, "live upgrade: new replica")
    if not twins:
        return
    upgraded = {r["metadata"]["name"]: _addr(r) for r in twins}
    ctx.patch_spec(
        "engine", engine, {"image": new, "upgradedReplicaAddressMap": upgraded}, "live upgrade: engine"
    )


def make_twins(ctx: ReconcileContext, scope: VolumeScope, image: str, reason: str) -> list[Obj] | None:
    """A replica on `image` beside every running, in-sync active replica that is not on it, on the
    same data path (created inactive, started by the volume controller). Returns them once every one
    runs `image` (an empty list when no replica needs one); None while some are missing or starting.

    A data path that already holds a replica on `image` (inactive, or already switched active by an
    earlier swap) gets none, so however many rounds run and whichever writes were lost, there is never
    more than one new replica per old one. A new replica that failed is deleted, and its replacement
    made only once it is seen gone, never beside it.
    """
    on_image: dict[tuple[str, str], Obj] = {}
    failing: set[tuple[str, str]] = set()
    for replica in scope.live():
        if spec(replica).get("image") != image:
            continue
        if broken(replica) and not is_active(replica):
            ctx.delete("replica", replica, f"{reason} failed, make another")
            failing.add(data_path(replica))
        else:
            on_image[data_path(replica)] = replica
    sources = [
        r
        for r in scope.active()
        if spec(r).get("image") != image and running(r) and not failed(r) and spec(r).get("healthyAt")
    ]
    matched: list[Obj] = []
    for source in sources:
        path = data_path(source)
        twin = on_image.get(path)
        if twin is None and path not in failing:
            twin = objects.replica(
                scope.volume,
                ctx.namespace,
                name=f"{scope.name}-r-{ctx.new_suffix()}",
                node_id=path[0],
                image=image,
                active=False,
                healthy_at=spec(source).get("healthyAt", ""),
                data_directory=path[1],
            )
            twin["spec"]["desireState"] = "running"
            ctx.create("replica", twin, reason)
            on_image[path] = twin
        if twin is not None:
            matched.append(twin)
    ready = not failing and all(running(r) and status(r).get("currentImage") == image for r in matched)
    return matched if ready else None


def swap_replicas(ctx: ReconcileContext, scope: VolumeScope, image: str) -> bool:
    """Make the replicas on `image` the volume's replica set (the engine already runs `image`): they
    become active, the replicas on any other image go (and a new one that failed before it was ever
    switched in), the engine's replica map points at the running ones. Idempotent: each round writes
    only what the observed objects still lack. True when the observed objects already showed the swap
    complete (nothing was left to write)."""
    engine = scope.engine
    assert engine is not None
    fresh = [
        r for r in scope.live() if spec(r).get("image") == image and not (broken(r) and not is_active(r))
    ]
    usable = [r for r in fresh if not broken(r) and running(r) and status(r).get("currentImage") == image]
    if not usable:
        # nothing to switch to: the new replicas are gone (or fell back to the old image while the
        # volume was detached). Make them again; the old replicas keep serving meanwhile
        make_twins(ctx, scope, image, "replica follows the engine image")
        return False
    keep = {r["metadata"]["name"] for r in fresh}
    others = [r for r in scope.live() if r["metadata"]["name"] not in keep]
    done = not others and all(is_active(r) for r in fresh)
    done = done and not spec(engine).get("upgradedReplicaAddressMap")
    for replica in fresh:
        ctx.patch_spec("replica", replica, {"active": True}, "live upgrade: switch replicas")
    for replica in others:
        ctx.delete("replica", replica, "live upgrade: old replica")
    addresses = {r["metadata"]["name"]: _addr(r) for r in usable}
    ctx.patch_spec(
        "engine",
        engine,
        {"replicaAddressMap": addresses, "upgradedReplicaAddressMap": {}},
        "live upgrade: engine on the new replicas",
    )
    if not done:
        ctx.patch_status(
            "engine", engine, {"replicaModeMap": dict.fromkeys(addresses, "RW")}, "live upgrade: replicas"
        )
    return done


def switch_engine_image(ctx: ReconcileContext, scope: VolumeScope) -> None:
    """The engine controller: a running engine whose spec.image moved switches its binary."""
    engine = scope.engine
    assert engine is not None
    image = spec(engine).get("image", "")
    if not running(engine) or status(engine).get("currentImage") == image:
        return
    if ctx.config.profile(image).stalls(str(spec(engine).get("volumeName", "")), image):
        ctx.waited(f"engine-upgrade/{engine['metadata']['name']}/{image}", float("inf"))
        return
    if ctx.waited(
        f"engine-upgrade/{engine['metadata']['name']}/{image}", ctx.config.live_upgrade_seconds / 2
    ):
        ctx.patch_status("engine", engine, {"currentImage": image}, "engine switched image")


def _addr(replica: Obj) -> str:
    return f"{status(replica).get('ip', '')}:{status(replica).get('port', 0)}"
