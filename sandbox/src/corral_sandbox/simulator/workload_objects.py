"""Builders for Longhorn's DaemonSets and Deployments, shaped as a Longhorn v1.10 install has them.

* Installed by the chart, **unmanaged** (the danger-zone settings never touch them):
  `longhorn-manager` (DaemonSet), `longhorn-ui` and `longhorn-driver-deployer` (Deployments).
* Created by longhorn-manager, **managed** (label `longhorn.io/managed-by: longhorn-manager`, pod
  templates built from the danger-zone settings current at creation): the CSI plugin DaemonSet
  `longhorn-csi-plugin` (containers node-driver-registrar, longhorn-liveness-probe,
  longhorn-csi-plugin), the CSI sidecar Deployments csi-attacher / csi-provisioner / csi-resizer /
  csi-snapshotter, and one `engine-image-<ei name>` DaemonSet per EngineImage (liveness probe from
  the three `engine-image-pod-liveness-probe-*` settings).
"""

from __future__ import annotations

from typing import Any

from corral_dangerzone import DangerZoneSettings
from corral_dangerzone.workloads import csi_plugin_template_annotation
from corral_sandbox.simulator.component_settings import (
    COMPONENT,
    MANAGED_BY,
    MANAGER,
    pod_fields,
    resources,
)

Obj = dict[str, Any]

CSI_PLUGIN = "longhorn-csi-plugin"
CSI_PLUGIN_CONTAINERS = ("node-driver-registrar", "longhorn-liveness-probe", "longhorn-csi-plugin")
CSI_DEPLOYMENTS = ("csi-attacher", "csi-provisioner", "csi-resizer", "csi-snapshotter")
MANAGER_DS = "longhorn-manager"
UI = "longhorn-ui"
DRIVER_DEPLOYER = "longhorn-driver-deployer"
UNMANAGED = (MANAGER_DS, UI, DRIVER_DEPLOYER)
MANAGER_IMAGE = "longhornio/longhorn-manager:v1.10.0"
_SIDECAR_IMAGES = {
    "csi-attacher": "longhornio/csi-attacher:v4.9.0",
    "csi-provisioner": "longhornio/csi-provisioner:v5.3.0",
    "csi-resizer": "longhornio/csi-resizer:v1.14.0",
    "csi-snapshotter": "longhornio/csi-snapshotter:v8.3.0",
    "node-driver-registrar": "longhornio/csi-node-driver-registrar:v2.14.0",
    "longhorn-liveness-probe": "longhornio/livenessprobe:v2.16.0",
    "longhorn-csi-plugin": MANAGER_IMAGE,
}


def engine_image_daemonset_name(engine_image: str) -> str:
    """Longhorn's `engine-image-<EngineImage name>`."""
    return f"engine-image-{engine_image}"


def _workload(kind: str, name: str, namespace: str, app: str, labels: Obj, template: Obj) -> Obj:
    spec: Obj = {"selector": {"matchLabels": {"app": app}}, "template": template}
    if kind == "DaemonSet":
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}}
    else:
        spec["strategy"] = {"type": "RollingUpdate"}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app, **labels}},
        "spec": spec,
    }


def _template(app: str, labels: Obj, annotations: Obj, spec: Obj, containers: list[Obj]) -> Obj:
    meta: Obj = {"labels": {"app": app, **labels}}
    if annotations:
        meta["annotations"] = annotations
    return {
        "metadata": meta,
        "spec": {**spec, "containers": containers, "serviceAccountName": "longhorn-service-account"},
    }


def _container(name: str, image: str, extra: Obj | None = None) -> Obj:
    return {"name": name, "image": image, **(extra or {})}


def unmanaged(name: str, namespace: str) -> Obj:
    """longhorn-manager, longhorn-ui or longhorn-driver-deployer, as the chart installs them."""
    labels = {"app.kubernetes.io/name": "longhorn"}
    if name == MANAGER_DS:
        template = _template(name, labels, {}, {}, [_container("longhorn-manager", MANAGER_IMAGE)])
        return _workload("DaemonSet", name, namespace, name, labels, template)
    image = "longhornio/longhorn-ui:v1.10.0" if name == UI else MANAGER_IMAGE
    template = _template(name, labels, {}, {}, [_container(name, image)])
    workload = _workload("Deployment", name, namespace, name, labels, template)
    workload["spec"]["replicas"] = 2 if name == UI else 1
    return workload


def _managed_labels(component: str) -> Obj:
    return {MANAGED_BY: MANAGER, COMPONENT: component}


def csi_plugin(settings: DangerZoneSettings, namespace: str) -> Obj:
    labels = _managed_labels("csi-plugin")
    annotations, spec = pod_fields(settings)
    network = csi_plugin_template_annotation(settings)
    if network is not None:
        annotations["k8s.v1.cni.cncf.io/networks"] = network
    containers = [
        _container(c, _SIDECAR_IMAGES[c], {"resources": resources(settings, c)})
        for c in CSI_PLUGIN_CONTAINERS
    ]
    template = _template(CSI_PLUGIN, labels, annotations, spec, containers)
    return _workload("DaemonSet", CSI_PLUGIN, namespace, CSI_PLUGIN, labels, template)


def csi_deployment(name: str, settings: DangerZoneSettings, namespace: str, replicas: int) -> Obj:
    labels = _managed_labels(name)
    annotations, spec = pod_fields(settings)
    containers = [_container(name, _SIDECAR_IMAGES[name], {"resources": resources(settings, name)})]
    template = _template(name, labels, annotations, spec, containers)
    workload = _workload("Deployment", name, namespace, name, labels, template)
    workload["spec"]["replicas"] = replicas
    return workload


def engine_image_daemonset(engine_image: Obj, settings: DangerZoneSettings, namespace: str) -> Obj:
    ei_name = engine_image["metadata"]["name"]
    name = engine_image_daemonset_name(ei_name)
    labels = {**_managed_labels("engine-image"), "longhorn.io/engine-image": ei_name}
    annotations, spec = pod_fields(settings)
    probe = {
        "exec": {"command": ["sh", "-c", "ls /data/longhorn && /data/longhorn version --client-only"]},
        "initialDelaySeconds": 3,
        "periodSeconds": settings.engine_image_liveness_probe_period,
        "timeoutSeconds": settings.engine_image_liveness_probe_timeout,
        "failureThreshold": settings.engine_image_liveness_probe_failure_threshold,
    }
    image = str((engine_image.get("spec") or {}).get("image", ""))
    containers = [_container(f"engine-image-{ei_name}", image, {"livenessProbe": probe})]
    template = _template(name, labels, annotations, spec, containers)
    workload = _workload("DaemonSet", name, namespace, name, labels, template)
    workload["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "longhorn.io/v1beta2",
            "kind": "EngineImage",
            "name": ei_name,
            "uid": engine_image["metadata"].get("uid", ""),
            "controller": True,
        }
    ]
    return workload
