"""SIM-K8S node images: the kubelet's `status.images[].names` of a Kubernetes node, the images it
has pulled.

The v2 upgrade's manager checks that the default instance-manager image is on every node before it
starts (V2U-02); so a seeded node lists the images the seed's cluster runs, the kubelet adds an
instance-manager pod's image once the pod runs there, and a scenario removes one through the control
API (`SimFaults.set_node_images`) to stage "image missing from a node".
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.view import Obj, status

IMAGE_SIZE = 104857600  # what a pulled image reports (`sizeBytes`): the same for all, 100 MiB


def image_entry(image: str) -> dict[str, Any]:
    return {"names": [image], "sizeBytes": IMAGE_SIZE}


def node_image_names(kube_node: Obj) -> list[str]:
    return [
        str(name)
        for entry in status(kube_node).get("images", []) or []
        if isinstance(entry, dict)
        for name in entry.get("names", []) or []
    ]


def pull_image(ctx: ReconcileContext, node: str, image: str) -> None:
    """The kubelet pulled `image` to run a pod on `node`: list it, unless it already is."""
    kube_node = ctx.view.get("kubenode", node)
    if kube_node is None or not image or image in node_image_names(kube_node):
        return
    images = [*(status(kube_node).get("images", []) or []), image_entry(image)]
    ctx.patch_status("kubenode", kube_node, {"images": images}, f"image {image} pulled")
