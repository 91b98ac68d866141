"""Builders for the objects the simulated Longhorn controllers create, shared with the seed renderer
so a seeded cluster and a simulator-grown one have exactly the same shape.

Names follow Longhorn: `ei-<sha512[:8]>` for engine images, `instance-manager-<hash>` for instance
managers (the pod has the IM's name), `<volume>-e-0` for the engine and `<volume>-r-<8 hex>` for
replicas (the hex comes from the simulator's seeded RNG).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from corral_sandbox.simulator.conditions import condition
from corral_sandbox.simulator.im_v2 import v2_args, v2_resources
from corral_sandbox.simulator.settings import (
    LAST_APPLIED_TOLERATIONS,
    STORAGE_NETWORK_ANNOTATION,
    as_int,
    cpu_quantity,
    instance_manager_cpu_millis,
    parse_node_selector,
    parse_tolerations,
    storage_network_annotation,
)

Obj = dict[str, Any]
LONGHORN = "longhorn.io/v1beta2"
FINALIZER = "longhorn.io"


def engine_image_name(image: str) -> str:
    return "ei-" + hashlib.sha512(image.strip().encode()).hexdigest()[:8]


def instance_manager_name(node: str, data_engine: str, image: str) -> str:
    digest = hashlib.sha256(f"{node}|{data_engine}|{image}".encode()).hexdigest()[:8]
    return f"instance-manager-{digest}"


def engine_name(volume: str) -> str:
    return f"{volume}-e-0"


def _meta(name: str, namespace: str, labels: dict[str, str] | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return meta


def volume(
    name: str,
    namespace: str,
    *,
    image: str,
    size: str = "1073741824",
    replicas: int = 3,
    node_id: str = "",
    data_engine: str = "v1",
    standby: bool = False,
    data_locality: str = "disabled",
    frontend: str = "blockdev",
) -> Obj:
    return {
        "apiVersion": LONGHORN,
        "kind": "Volume",
        "metadata": {**_meta(name, namespace), "finalizers": [FINALIZER]},
        "spec": {
            "image": image,
            "size": size,
            "numberOfReplicas": replicas,
            "nodeID": node_id,
            "dataEngine": data_engine,
            "Standby": standby,  # sic: Longhorn's json tag is capitalised
            "dataLocality": data_locality,
            "frontend": "" if standby else frontend,
            "accessMode": "rwo",
            "migratable": False,
            "migrationNodeID": "",
            "staleReplicaTimeout": 30,
            "targetNodeIDForLiveUpgrade": "",
        },
    }


def engine(volume_obj: Obj, namespace: str) -> Obj:
    vspec = volume_obj["spec"]
    name = volume_obj["metadata"]["name"]
    current = volume_obj.get("status", {}).get("currentImage") or vspec["image"]
    return {
        "apiVersion": LONGHORN,
        "kind": "Engine",
        "metadata": {
            **_meta(engine_name(name), namespace, {"longhornvolume": name}),
            "finalizers": [FINALIZER],
        },
        "spec": {
            "volumeName": name,
            "image": current,
            "nodeID": "",
            "dataEngine": vspec.get("dataEngine", "v1"),
            "desireState": "stopped",
            "volumeSize": vspec.get("size", ""),
            "active": True,
            "replicaAddressMap": {},
            "upgradedReplicaAddressMap": {},
            "targetNodeIDForLiveUpgrade": "",
        },
    }


def replica(
    volume_obj: Obj,
    namespace: str,
    *,
    name: str,
    node_id: str,
    image: str,
    active: bool = True,
    healthy_at: str = "",
    data_directory: str = "",
) -> Obj:
    vname = volume_obj["metadata"]["name"]
    vspec = volume_obj["spec"]
    data_engine = vspec.get("dataEngine", "v1")
    return {
        "apiVersion": LONGHORN,
        "kind": "Replica",
        "metadata": {**_meta(name, namespace, {"longhornvolume": vname}), "finalizers": [FINALIZER]},
        "spec": {
            "volumeName": vname,
            "engineName": engine_name(vname),
            # v2 replicas follow whatever instance manager runs on their node
            "image": "" if data_engine == "v2" else image,
            "nodeID": node_id,
            "dataEngine": data_engine,
            "desireState": "stopped",
            "active": active,
            "healthyAt": healthy_at,
            "failedAt": "",
            "volumeSize": vspec.get("size", ""),
            "dataDirectoryName": data_directory or name,
        },
    }


def engine_image(image: str, namespace: str) -> Obj:
    return {
        "apiVersion": LONGHORN,
        "kind": "EngineImage",
        "metadata": {**_meta(engine_image_name(image), namespace), "finalizers": [FINALIZER]},
        "spec": {"image": image},
    }


def instance_manager(node: str, data_engine: str, image: str, namespace: str) -> Obj:
    return {
        "apiVersion": LONGHORN,
        "kind": "InstanceManager",
        "metadata": _meta(
            instance_manager_name(node, data_engine, image),
            namespace,
            {
                "longhorn.io/component": "instance-manager",
                "longhorn.io/node": node,
                "longhorn.io/instance-manager-image": _label_safe(image),
                "longhorn.io/instance-manager-type": "aio",
                "longhorn.io/data-engine": data_engine,
            },
        ),
        "spec": {"nodeID": node, "image": image, "type": "aio", "dataEngine": data_engine},
    }


def _label_safe(image: str) -> str:
    """Label values cannot hold ':' or '/': Longhorn labels the IM image by a checksum name."""
    return "imi-" + hashlib.sha512(image.encode()).hexdigest()[:8]


def instance_manager_pod(
    im: Obj, setting: Callable[[str], str], allocatable_millicpu: int, node_cpu_request: int
) -> Obj:
    """The IM pod exactly as createInstanceManagerPodSpec would build it from the *current* settings."""
    ispec = im["spec"]
    meta = im["metadata"]
    data_engine = ispec.get("dataEngine", "v1")
    tolerations = parse_tolerations(setting("taint-toleration"))
    annotations = {LAST_APPLIED_TOLERATIONS: json.dumps(tolerations)}
    network = storage_network_annotation(setting("storage-network"))
    if network:
        annotations[STORAGE_NETWORK_ANNOTATION] = network
    millis = instance_manager_cpu_millis(
        node_cpu_request,
        allocatable_millicpu,
        setting("guaranteed-instance-manager-cpu"),
        data_engine,
        setting("data-engine-number-of-cpu-cores"),
    )
    timeout = as_int(setting("instance-manager-pod-liveness-probe-timeout"), 10)
    resources: Obj = {"requests": {"cpu": cpu_quantity(millis)}} if millis else {}
    args = ["instance-manager", "--debug", "daemon", "--listen", ":8500"]
    if data_engine == "v2":
        args = v2_args(im, setting)
        resources = v2_resources(setting, cpu_quantity(millis) if millis else "")
    container: Obj = {
        "name": "instance-manager",
        "image": ispec["image"],
        "args": args,
        "resources": resources,
        "livenessProbe": {
            "timeoutSeconds": timeout,
            "periodSeconds": timeout + 1,
            "initialDelaySeconds": 3,
            "failureThreshold": 6,
        },
    }
    pod_spec: Obj = {
        "nodeName": ispec["nodeID"],
        "tolerations": tolerations,
        "containers": [container],
        "restartPolicy": "Never",
        "serviceAccountName": "longhorn-service-account",
        "volumes": [{"name": "log", "hostPath": {"path": setting("log-path") or "/var/lib/longhorn/logs"}}],
    }
    selector = parse_node_selector(setting("system-managed-components-node-selector"))
    if selector:
        pod_spec["nodeSelector"] = selector
    priority_class = setting("priority-class")
    if priority_class:
        pod_spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": dict(meta.get("labels", {})),
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": LONGHORN,
                    "kind": "InstanceManager",
                    "name": meta["name"],
                    "uid": meta.get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": pod_spec,
    }


def longhorn_node(
    name: str, namespace: str, *, ready: bool = True, schedulable: bool = True, im_cpu_request: int = 0
) -> Obj:
    flag = "True" if ready else "False"
    return {
        "apiVersion": LONGHORN,
        "kind": "Node",
        "metadata": _meta(name, namespace),
        "spec": {"allowScheduling": schedulable, "instanceManagerCPURequest": im_cpu_request},
        "status": {
            "conditions": [
                condition(None, "Ready", flag, reason="" if ready else "KubernetesNodeNotReady"),
                condition(None, "Schedulable", "True" if schedulable else "False"),
            ],
            "cpuPolicy": "none",
        },
    }


def kube_node(
    name: str,
    *,
    cpu: str = "4",
    labels: dict[str, str] | None = None,
    ready: bool = True,
    cordoned: bool = False,
    hugepages: str = "",
    hugepages_allocatable: str = "",
    images: list[str] | None = None,
) -> Obj:
    """`hugepages` is the node's `hugepages-2Mi` capacity ("": none reported), allocatable the same
    unless `hugepages_allocatable` says otherwise. `images`: pulled already (`status.images`)."""
    pages = {"hugepages-2Mi": hugepages} if hugepages else {}
    free = {"hugepages-2Mi": hugepages_allocatable or hugepages} if hugepages else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {
            "allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110", **free},
            "capacity": {"cpu": cpu, "memory": "16Gi", "pods": "110", **pages},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "images": [{"names": [image], "sizeBytes": 104857600} for image in images or []],
        },
    }


CORRAL = "corral.longhorn.io/v1alpha1"


def node_data_engine_upgrade(
    name: str, namespace: str, *, node: str, image: str, manager: str = "data-engine-upgrade", state: str = ""
) -> Obj:
    """A NodeDataEngineUpgrade as the v2-upgrade service creates it (labels of §5.2), for tests that
    play its part against the simulator; `state` goes into the status as given."""
    body: Obj = {
        "apiVersion": CORRAL,
        "kind": "NodeDataEngineUpgrade",
        "metadata": _meta(
            name,
            namespace,
            {
                "longhorn.io/component": "node-data-engine-upgrade",
                "longhorn.io/data-engine-upgrade-manager": manager,
                "longhorn.io/node": node,
            },
        ),
        "spec": {
            "nodeID": node,
            "dataEngine": "v2",
            "instanceManagerImage": image,
            "dataEngineUpgradeManager": manager,
        },
    }
    if state:
        body["status"] = {"state": state}
    return body
