"""SIM-EI: the EngineImage controller — per-node deployment, version fields, CLI compatibility,
reference counts and `noRefSince`, finalizer cleanup and expiry (longhorn-behaviour.md §1.1, §1.5).

Which image "works" and which nodes it never deploys to comes from the image's profile in SimConfig.
"""

from __future__ import annotations

from collections import Counter

from corral_sandbox.simulator.conditions import condition
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.objects import FINALIZER
from corral_sandbox.simulator.view import ClusterView, Obj, deleting, spec, status


def image_references(view: ClusterView) -> Counter[str]:
    """refCount per image: volumes + engines + replicas whose spec.image or status.currentImage is it."""
    counts: Counter[str] = Counter()
    for kind in ("volume", "engine", "replica"):
        for obj in view.objects[kind].values():
            images = {spec(obj).get("image", ""), status(obj).get("currentImage", "")}
            for image in images:
                if image:
                    counts[image] += 1
    return counts


def ready_nodes(view: ClusterView) -> list[str]:
    """Longhorn nodes whose Ready condition is True, sorted."""
    names = []
    for node in view.all("node"):
        for held in status(node).get("conditions", []) or []:
            if held.get("type") == "Ready" and held.get("status") == "True":
                names.append(node["metadata"]["name"])
    return names


def cli_incompatible(ctx: ReconcileContext, cli_version: int, cli_min_version: int) -> bool:
    manager = ctx.config.manager
    return manager.cli_api_min_version > cli_version or manager.cli_api_version < cli_min_version


def reconcile_engine_images(ctx: ReconcileContext) -> None:
    references = image_references(ctx.view)
    nodes = ready_nodes(ctx.view)
    default_image = ctx.view.setting("default-engine-image")
    for ei in ctx.view.all("engineimage"):
        with ctx.isolated("engineimage", ei):
            _reconcile_one(ctx, ei, references, nodes, default_image)


def _reconcile_one(
    ctx: ReconcileContext, ei: Obj, references: Counter[str], nodes: list[str], default_image: str
) -> None:
    name = ei["metadata"]["name"]
    image = str(spec(ei).get("image", "")).strip()
    if deleting(ei):
        # the DaemonSet is gone at once in the simulation; only the finalizer is left to clear
        finalizers = [f for f in ei["metadata"].get("finalizers", []) if f != FINALIZER]
        if finalizers != ei["metadata"].get("finalizers", []):
            ctx.patch_metadata("engineimage", ei, {"finalizers": finalizers}, "engine image deleted")
        return
    if FINALIZER not in ei["metadata"].get("finalizers", []):
        ctx.patch_metadata(
            "engineimage", ei, {"finalizers": [*ei["metadata"].get("finalizers", []), FINALIZER]}, "adopt"
        )
    profile = ctx.config.profile(image)
    wanted: dict[str, object] = {
        "ownerID": status(ei).get("ownerID") if status(ei).get("ownerID") in nodes else _owner(name, nodes),
        "version": profile.version,
        "gitCommit": profile.commit_for(image),
        "buildDate": "2026-01-01T00:00:00+00:00",
        "cliAPIVersion": profile.cli_api_version,
        "cliAPIMinVersion": profile.cli_api_min_version,
        "controllerAPIVersion": profile.controller_api_version,
        "controllerAPIMinVersion": profile.controller_api_min_version,
        "dataFormatVersion": profile.data_format_version,
        "dataFormatMinVersion": profile.data_format_min_version,
    }
    ref_count = references.get(image, 0)
    wanted["refCount"] = ref_count
    if ref_count == 0:
        wanted["noRefSince"] = status(ei).get("noRefSince") or ctx.stamp
    else:
        wanted["noRefSince"] = ""

    if cli_incompatible(ctx, profile.cli_api_version, profile.cli_api_min_version):
        # Longhorn stops the sync here: incompatible, ready=False/binary, the state left as it was
        wanted["incompatible"] = True
        wanted["state"] = status(ei).get("state") or "deploying"
        wanted["conditions"] = [_ready("False", "binary", "incompatible", ctx.stamp, ei)]
        ctx.patch_status("engineimage", ei, wanted, "incompatible engine image")
        return
    wanted["incompatible"] = False

    deployment: dict[str, bool] = {}
    for node in nodes:
        already = bool((status(ei).get("nodeDeploymentMap") or {}).get(node))
        deployed = node not in profile.undeployed_nodes and (
            already or ctx.waited(f"ei-deploy/{name}/{node}", ctx.config.engine_image_deploy_seconds)
        )
        deployment[node] = deployed
    wanted["nodeDeploymentMap"] = deployment
    done = sum(deployment.values())
    if nodes and done == len(nodes):
        wanted["state"] = "deployed"
        wanted["conditions"] = [_ready("True", "", "", ctx.stamp, ei)]
    else:
        wanted["state"] = "deploying"
        message = f"Engine image is not fully deployed on targeted ready nodes: {done} of {len(nodes)}"
        wanted["conditions"] = [_ready("False", "daemonSet", message, ctx.stamp, ei)]
    ctx.patch_status("engineimage", ei, wanted, "engine image status")

    expiry = ctx.config.engine_image_expiry_seconds
    unused = ref_count == 0 and image != default_image and expiry is not None
    if unused and expiry is not None and ctx.waited(f"ei-expiry/{name}", expiry):
        ctx.delete("engineimage", ei, "engine image unused past its expiry")


def _owner(name: str, nodes: list[str]) -> str:
    if not nodes:
        return ""
    return nodes[sum(name.encode()) % len(nodes)]


def _ready(value: str, reason: str, message: str, stamp: str, ei: Obj) -> dict[str, str]:
    """The `ready` condition, keeping its transition time while the status does not change."""
    return condition(
        status(ei).get("conditions"), "ready", value, reason=reason, message=message, stamp=stamp
    )
