"""SIM-IM: the instance-manager controller and the kubelet under it.

* One InstanceManager per ready node and enabled data engine with the default IM image is kept.
* Its pod (same name) is built from the settings *current at creation* (objects.instance_manager_pod):
  a deleted pod is recreated with the new tolerations, priority class, CPU request, … — the effect
  corral's im-restart relies on — after an optional per-IM back-off.
* The pod goes Pending → Running/ready after `im_startup_seconds` (timed per pod UID, so a recreated
  pod starts over) once it fits on its node (im_nodes.py: CPU and hugepages); `currentState`
  follows the pod (§4.2 step 5) and the instance maps list the engines and replicas running in it
  with their own states; a v2 IM records its data-engine status from its pod (im_v2.py).
* Nodes (im_nodes.py): no pod is created on a cordoned node (NodeReady False/Unschedulable), no v2
  IM on a node labelled `node.longhorn.io/disable-v2-data-engine=true`, no IM on a node the
  system-managed-components node selector excludes (idle ones there are removed).
* Every IM pod uid seen is kept in order per IM (`Memory.im_pod_history`, im_ledger.py), so a test
  can count restarts by uid as well as by restartCount.
"""

from __future__ import annotations

import hashlib
import zlib
from collections import defaultdict
from typing import Any

from corral_sandbox.simulator import objects
from corral_sandbox.simulator.conditions import condition
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.engine_images import ready_nodes
from corral_sandbox.simulator.im_nodes import (
    allocatable_millicpu,
    cordoned,
    excluded_by_selector,
    node_cpu_request,
    unfit_reason,
    v2_disabled,
)
from corral_sandbox.simulator.im_v2 import recorded_status
from corral_sandbox.simulator.node_images import pull_image
from corral_sandbox.simulator.settings import as_bool
from corral_sandbox.simulator.upgrade_signals import upgrading_nodes
from corral_sandbox.simulator.v2_engine import v2_target_nodes
from corral_sandbox.simulator.view import Obj, deleting, spec, status

IM_COMPONENT = "instance-manager"


def reconcile_instance_managers(ctx: ReconcileContext) -> None:
    _ensure_default_managers(ctx)
    instances = _instances_by_manager(ctx)
    nodes = set(ready_nodes(ctx.view))
    keep_v2 = upgrading_nodes(ctx.view) | v2_target_nodes(ctx.view)
    for im in ctx.view.all("instancemanager"):
        held = instances.get(im["metadata"]["name"], {})
        with ctx.isolated("instancemanager", im):
            if _obsolete(ctx, im, held, keep_v2):
                ctx.delete("instancemanager", im, "instance manager no longer wanted and idle")
                continue
            _reconcile_manager(ctx, im, held, spec(im).get("nodeID", "") in nodes)
    _run_pods(ctx)


def _obsolete(
    ctx: ReconcileContext, im: Obj, instances: dict[str, dict[str, Any]], keep_v2: set[str]
) -> bool:
    """Longhorn removes an IM whose data engine was disabled, and an IM on an old image once no
    instance runs in it (IM-08, V2U-00) — but not a v2 one on a node whose data engine is being
    upgraded (§5.4: the v2 upgrade replaces it) or that holds a v2 engine's target (`keep_v2`)."""
    if deleting(im):
        return False
    data_engine = spec(im).get("dataEngine", "v1")
    if not as_bool(ctx.view.setting(f"{data_engine}-data-engine")):
        return True
    node = spec(im).get("nodeID", "")
    if (data_engine == "v2" and v2_disabled(ctx.view, node)) or excluded_by_selector(ctx.view, node):
        return not any(instances.values())  # removed once idle (T4.6, IM-10)
    old_image = spec(im).get("image") != ctx.view.setting("default-instance-manager-image")
    if data_engine == "v2" and node in keep_v2:
        return False
    return old_image and not any(instances.values())


def _ensure_default_managers(ctx: ReconcileContext) -> None:
    image = ctx.view.setting("default-instance-manager-image")
    if not image:
        return
    engines = [e for e in ("v1", "v2") if as_bool(ctx.view.setting(f"{e}-data-engine"))]
    # SIM-V2: a node's v2 IM keeps the image it was made with; only once it is gone (deleted by the
    # v2 data-engine upgrade) is it made again, with the default image of the moment
    has_v2 = {
        spec(im).get("nodeID", "")
        for im in ctx.view.all("instancemanager")
        if spec(im).get("dataEngine") == "v2" and not deleting(im)
    }
    for node in ready_nodes(ctx.view):
        if excluded_by_selector(ctx.view, node):
            continue
        for data_engine in engines:
            if data_engine == "v2" and (v2_disabled(ctx.view, node) or node in has_v2):
                continue
            name = objects.instance_manager_name(node, data_engine, image)
            if ctx.view.get("instancemanager", name) is None:
                ctx.create(
                    "instancemanager",
                    objects.instance_manager(node, data_engine, image, ctx.namespace),
                    "default instance manager missing on node",
                )


def _instances_by_manager(ctx: ReconcileContext) -> dict[str, dict[str, dict[str, Any]]]:
    result: dict[str, dict[str, dict[str, Any]]] = defaultdict(lambda: defaultdict(dict))
    for kind, field in (("engine", "instanceEngines"), ("replica", "instanceReplicas")):
        for obj in ctx.view.all(kind):
            istatus = status(obj)
            manager = istatus.get("instanceManagerName")
            state = istatus.get("currentState", "")
            if manager and state in ("starting", "running", "suspended", "error"):
                result[manager][field][obj["metadata"]["name"]] = {
                    "spec": {
                        "name": obj["metadata"]["name"],
                        "dataEngine": spec(obj).get("dataEngine", "v1"),
                    },
                    "status": {"state": state, "portStart": istatus.get("port", 0)},
                }
    return result


def _reconcile_manager(
    ctx: ReconcileContext, im: Obj, instances: dict[str, dict[str, Any]], node_ready: bool
) -> None:
    name = im["metadata"]["name"]
    pod = ctx.view.get("pod", name)
    if deleting(im):
        if pod is not None and not deleting(pod):
            ctx.delete("pod", pod, "instance manager deleted")
        return
    current = status(im).get("currentState", "")
    ip = ""
    if pod is None:
        state = "stopped" if current in ("", "stopped") else "error"
        reason = "NotFound"
    elif deleting(pod):
        state, reason = "error", "Deleting"
    else:
        phase = status(pod).get("phase", "")
        ready = all(c.get("ready") for c in status(pod).get("containerStatuses", []) or [{}])
        if phase in ("", "Pending"):
            state, reason = "starting", "Starting"
        elif phase == "Running" and ready:
            state, reason, ip = "running", "Running", status(pod).get("podIP", "")
        elif phase == "Running":
            state, reason = "starting", "Starting"
        else:
            state, reason = "error", "Failed"
    if not node_ready and state not in ("error", "stopped"):
        state, reason, ip = "unknown", "Down", ""  # syncStatusWithNode: the node is down
    maps = instances if state == "running" else {}
    node = spec(im).get("nodeID", "")
    held = status(im).get("conditions", None) or []
    node_condition = condition(held, "NodeReady", "True", stamp=ctx.stamp)
    if not node_ready:
        node_condition = condition(held, "NodeReady", "False", reason="Down", stamp=ctx.stamp)
    elif pod is None and cordoned(ctx.view, node):
        node_condition = condition(
            held,
            "NodeReady",
            "False",
            reason="Unschedulable",
            message=f"Instance manager node {node} is unschedulable",
            stamp=ctx.stamp,
        )
    wanted: dict[str, Any] = {
        "currentState": state,
        "ip": ip,
        "ownerID": node,
        # omitempty in Longhorn's Go type: an IM without instances has neither key
        "instanceEngines": dict(maps.get("instanceEngines", {})) or None,
        "instanceReplicas": dict(maps.get("instanceReplicas", {})) or None,
        # PodReady and NodeReady are the IM controller's; the others (SettingSynced, written by
        # corral's im-restart) are kept, or the two would rewrite the list in turn forever.
        "conditions": [
            condition(
                held, "PodReady", "True" if state == "running" else "False", reason=reason, stamp=ctx.stamp
            ),
            node_condition,
            *(c for c in held if c.get("type") not in ("PodReady", "NodeReady")),
        ],
    }
    recorded = recorded_status(pod)
    if recorded is not None:
        wanted["dataEngineStatus"] = recorded
    ctx.patch_status("instancemanager", im, wanted, f"instance manager {state}")
    if pod is not None and state == "error" and not deleting(pod) and ctx.config.im_delete_failed_pods:
        ctx.delete("pod", pod, "instance manager pod failed: recreate")
    if pod is None:
        _recreate_pod(ctx, im)


def sync_instance_maps(ctx: ReconcileContext) -> None:
    """The instance maps of every IM, from its instances as this round left them.

    In Longhorn the IM's maps are what its process reports and the instance handler copies an
    instance's state from them, so the two never disagree. Here the instances change after the IM
    controller ran, so the instance controller ends its round with this: a map and the states it
    lists are written in the same round (issue 24's conformance)."""
    instances = _instances_by_manager(ctx)
    gone = {w.name for w in ctx.writes if w.verb == "delete" and w.kind == "instancemanager"}
    for im in ctx.view.all("instancemanager"):
        if deleting(im) or im["metadata"]["name"] in gone:
            continue
        with ctx.isolated("instancemanager", im):
            maps = instances.get(im["metadata"]["name"], {})
            if status(im).get("currentState") != "running":
                maps = {}
            ctx.patch_status(
                "instancemanager",
                im,
                {
                    "instanceEngines": dict(maps.get("instanceEngines", {})) or None,
                    "instanceReplicas": dict(maps.get("instanceReplicas", {})) or None,
                },
                "instance maps follow the instances",
            )


def _recreate_pod(ctx: ReconcileContext, im: Obj) -> None:
    name = im["metadata"]["name"]
    node_name = spec(im).get("nodeID", "")
    if cordoned(ctx.view, node_name):
        return  # a cordoned node gets no new IM pod (the NodeReady condition says why)
    if spec(im).get("dataEngine") == "v2" and node_name in ctx.memory.v2_im_down:
        return  # SIM-CRASH: the node's v2 IM is kept down (SimFaults.kill_v2_instance_manager)
    until = ctx.memory.im_backoff_until.get(name, 0.0)
    if ctx.now < until:
        ctx.deadlines.append(until)
        return
    ctx.memory.im_backoff_until[name] = ctx.now + ctx.config.im_recreate_backoff_seconds
    allocatable = allocatable_millicpu(ctx.view, node_name, ctx.config.default_node_millicpu)
    request = node_cpu_request(ctx.view, node_name)
    pod = objects.instance_manager_pod(im, ctx.view.setting, allocatable, request)
    ctx.create("pod", pod, "instance manager pod (re)created with current settings")


def _run_pods(ctx: ReconcileContext) -> None:
    """The kubelet: IM pods start after the start-up delay; orphans (no IM) are collected."""
    nodes = sorted(ctx.view.objects["kubenode"]) or ready_nodes(ctx.view)
    for pod in ctx.view.all("pod"):
        with ctx.isolated("pod", pod):
            _run_pod(ctx, pod, nodes)


def _run_pod(ctx: ReconcileContext, pod: Obj, nodes: list[str]) -> None:
    labels = pod["metadata"].get("labels", {}) or {}
    if labels.get("longhorn.io/component") != IM_COMPONENT or deleting(pod):
        return
    name = pod["metadata"]["name"]
    im = ctx.view.get("instancemanager", name)
    if im is None:
        ctx.delete("pod", pod, "owner instance manager is gone")
        return
    uid = pod["metadata"].get("uid", "")
    history = ctx.memory.im_pod_history.setdefault(name, [])
    if uid and uid not in history[-1:]:
        history.append(uid)
    restarts = ctx.memory.pod_restarts.get(uid, 0)
    phase = status(pod).get("phase", "")
    failing = ctx.memory.fail_im_pods.get(name)
    node_name = pod.get("spec", {}).get("nodeName", "")
    if spec(im).get("dataEngine") == "v2" and node_name in ctx.memory.v2_im_down and phase != "Failed":
        failing = uid  # SIM-CRASH: every v2 IM pod on the node dies while the fault holds
    if failing is not None and failing != uid:
        del ctx.memory.fail_im_pods[name]  # its pod is gone, replaced: the fault is done
    elif failing is not None:
        if phase == "Failed":
            del ctx.memory.fail_im_pods[name]  # seen failed: the fault is done
        else:
            ctx.patch_status(
                "pod",
                pod,
                {"phase": "Failed", "reason": "Error", "conditions": [{"type": "Ready", "status": "False"}]},
                "instance manager container failed (fault)",
            )
            return
    if phase == "Failed":
        return  # a failed pod stays failed until someone deletes it
    if phase == "Running":
        statuses = status(pod).get("containerStatuses", []) or []
        if statuses and statuses[0].get("restartCount", 0) != restarts:
            ctx.patch_status(
                "pod",
                pod,
                {"containerStatuses": [{**statuses[0], "restartCount": restarts}]},
                "container restarted",
            )
        return
    unfit = unfit_reason(ctx.view, pod, ctx.config.default_node_millicpu)
    if unfit:
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": f"0/1 nodes are available: 1 {unfit}.",
        }
        ctx.patch_status("pod", pod, {"phase": "Pending", "conditions": [scheduled]}, f"pod pending: {unfit}")
        return
    startup = (
        ctx.config.v2_im_start_seconds
        if spec(im).get("dataEngine") == "v2"
        else ctx.config.im_startup_seconds
    )
    if ctx.waited(f"im-start/{uid}", startup):
        node = pod["spec"].get("nodeName", "")
        index = nodes.index(node) + 1 if node in nodes else zlib.crc32(node.encode()) % 250 + 1
        ip = f"10.42.{index}.{ctx.rng.randint(2, 254)}"
        ctx.patch_status(
            "pod",
            pod,
            {
                "phase": "Running",
                "podIP": ip,
                "hostIP": ip,
                "startTime": ctx.stamp,
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [_container_status(pod, ready=True, restarts=restarts, stamp=ctx.stamp)],
            },
            "instance manager pod running",
        )
        pull_image(ctx, node, (pod["spec"].get("containers") or [{}])[0].get("image", ""))
    elif phase != "Pending":
        ctx.patch_status(
            "pod",
            pod,
            {
                "phase": "Pending",
                "containerStatuses": [
                    _container_status(pod, ready=False, restarts=restarts, stamp=ctx.stamp)
                ],
            },
            "instance manager pod scheduled",
        )


def _container_status(pod: Obj, *, ready: bool, restarts: int, stamp: str) -> dict[str, Any]:
    """A containerStatus with every field clients require (kubernetes-asyncio validates them)."""
    image = (pod.get("spec", {}).get("containers") or [{}])[0].get("image", "")
    # derived from name and start time rather than the uid, so a replayed run writes the same bytes
    container = hashlib.sha256(f"{pod['metadata']['name']}|{stamp}".encode()).hexdigest()[:32]
    state: dict[str, Any] = (
        {"running": {"startedAt": stamp}} if ready else {"waiting": {"reason": "ContainerCreating"}}
    )
    return {
        "name": "instance-manager",
        "image": image,
        "imageID": image,
        "containerID": f"containerd://{container}" if ready else "",
        "ready": ready,
        "started": ready,
        "restartCount": restarts,
        "state": state,
    }
