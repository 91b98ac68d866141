"""SIM-K8S: the share-manager and backing-image-manager pods, the group-A components that are pods
(besides instance managers'). Each is built from the danger-zone settings current at its creation
(component_settings.py), so a pod setting-sync deletes comes back carrying the new value, as
Longhorn's controllers recreate them.

* Share manager (RWX volumes that are not migratable): `share-manager-<volume>` exists while the
  volume wants to be attached (`spec.nodeID` set or not yet detached) and is removed once it is
  detached; placed by the scheduler (kube_pods.py), on the RWX endpoint network (`lhnet2`) when
  `endpoint-network-for-rwx-volume` is set. Migratable RWX volumes have none.
* Backing-image manager: one `backing-image-manager-<hash>` per ready node that uses a backing
  image (holds a replica of a volume with `spec.backingImage`), bound to it, with the storage
  network (`lhnet1`) when `storage-network` is set. Longhorn runs a backing-image manager only
  where a backing image has files (its disks); a node that uses none has none, and loses it once
  it uses none any more.
"""

from __future__ import annotations

import hashlib

from corral_dangerzone.network import CNI_NETWORKS_ANNOTATION, ENDPOINT_NETWORK_INTERFACE, cni_annotation
from corral_sandbox.simulator.component_settings import (
    COMPONENT,
    MANAGED_BY,
    MANAGER,
    current_settings,
    pod_fields,
)
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.engine_images import ready_nodes
from corral_sandbox.simulator.view import Obj, deleting, spec, status

SHARE_MANAGER = "share-manager"
BACKING_IMAGE_MANAGER = "backing-image-manager"
SHARE_MANAGER_IMAGE = "longhornio/longhorn-share-manager:v1.10.0"
BIM_IMAGE = "longhornio/backing-image-manager:v1.10.0"


def share_manager_pod_name(volume: str) -> str:
    return f"share-manager-{volume}"


def backing_image_manager_pod_name(node: str) -> str:
    return f"backing-image-manager-{hashlib.sha256(node.encode()).hexdigest()[:8]}"


def wants_share_manager(volume: Obj) -> bool:
    vspec = spec(volume)
    if vspec.get("accessMode") != "rwx" or vspec.get("migratable"):
        return False
    return bool(vspec.get("nodeID")) or status(volume).get("state", "detached") != "detached"


def _pod(ctx: ReconcileContext, name: str, component: str, image: str, labels: dict[str, str]) -> Obj:
    settings = current_settings(ctx.view.setting)
    annotations, fields = pod_fields(settings, storage_network=component == BACKING_IMAGE_MANAGER)
    if component == SHARE_MANAGER and settings.endpoint_network_for_rwx_volume:
        # the RWX endpoint network (`lhnet2`), which group B rolls out to the CSI plugin
        annotations[CNI_NETWORKS_ANNOTATION] = cni_annotation(
            settings.endpoint_network_for_rwx_volume, ENDPOINT_NETWORK_INTERFACE
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": {COMPONENT: component, MANAGED_BY: MANAGER, **labels},
            "annotations": annotations,
        },
        "spec": {
            **fields,
            "containers": [{"name": component, "image": image}],
            "restartPolicy": "Always",
            "serviceAccountName": "longhorn-service-account",
        },
    }


def _share_manager(ctx: ReconcileContext, volume: Obj) -> None:
    name = share_manager_pod_name(volume["metadata"]["name"])
    pod = ctx.view.get("pod", name)
    if wants_share_manager(volume) and not deleting(volume):
        if pod is None:
            labels = {"longhorn.io/share-manager": volume["metadata"]["name"]}
            ctx.create("pod", _pod(ctx, name, SHARE_MANAGER, SHARE_MANAGER_IMAGE, labels), "RWX volume")
    elif pod is not None and not deleting(pod):
        ctx.delete("pod", pod, "RWX volume detached")


def backing_image_nodes(ctx: ReconcileContext) -> set[str]:
    """Nodes holding a replica of a volume that uses a backing image (where its files are)."""
    using = {
        v["metadata"]["name"]
        for v in ctx.view.all("volume")
        if spec(v).get("backingImage") and not deleting(v)
    }
    return {
        spec(r).get("nodeID", "")
        for r in ctx.view.all("replica")
        if not deleting(r)
        and spec(r).get("nodeID")
        and (spec(r).get("volumeName") in using or spec(r).get("backingImage"))
    }


def reconcile_component_pods(ctx: ReconcileContext) -> None:
    if not ctx.config.kube_workloads:
        return
    for volume in ctx.view.all("volume"):
        with ctx.isolated("volume", volume):
            _share_manager(ctx, volume)
    for pod in ctx.view.all("pod"):
        labels = pod["metadata"].get("labels") or {}
        owner = labels.get("longhorn.io/share-manager")
        if owner and ctx.view.get("volume", owner) is None and not deleting(pod):
            ctx.delete("pod", pod, "volume gone")
    if not ctx.config.backing_image_managers:
        return
    wanted = set(ready_nodes(ctx.view)) & backing_image_nodes(ctx)
    for node in sorted(wanted):
        name = backing_image_manager_pod_name(node)
        if ctx.view.get("pod", name) is None:
            pod = _pod(ctx, name, BACKING_IMAGE_MANAGER, BIM_IMAGE, {"longhorn.io/node": node})
            pod["spec"]["nodeName"] = node
            ctx.create("pod", pod, "backing-image manager for node")
    for pod in ctx.view.all("pod"):
        labels = pod["metadata"].get("labels") or {}
        gone = labels.get("longhorn.io/node") not in wanted
        if labels.get(COMPONENT) == BACKING_IMAGE_MANAGER and gone and not deleting(pod):
            ctx.delete("pod", pod, "node no longer ready, or it uses no backing image")
