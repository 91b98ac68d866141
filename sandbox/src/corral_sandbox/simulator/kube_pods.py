"""SIM-K8S: kube-scheduler and the kubelet for every pod that is not an instance manager's (the
instance-manager controller runs those: instance_managers.py).

* Scheduler: a pod without `nodeName` is bound to the first node, by name, that passes
  placement.py (node selector, a DaemonSet pod's node affinity, untolerated NoSchedule/NoExecute
  taints, a cordon); `PodScheduled=True`. When no node passes, the pod stays `Pending` with
  `PodScheduled=False`, reason `Unschedulable` and kube-scheduler's message
  ("0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector.").
* Kubelet: a bound pod becomes `Running` and ready after `pod_startup_seconds` (timed per pod UID,
  so a recreated pod starts over), with a pod IP; a pod bound by `nodeName` to a node its
  nodeSelector excludes, or with an untolerated NoExecute taint, stays Pending, unscheduled.
  A pod with a Multus networks annotation gets a `k8s.v1.cni.cncf.io/network-status` annotation:
  the default network plus the attached one (`lhnet1`/`lhnet2`) in 192.168.0.0/16.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.placement import misfit, unschedulable_message
from corral_sandbox.simulator.view import Obj, deleting, spec, status

IM_COMPONENT = "instance-manager"
NETWORKS = "k8s.v1.cni.cncf.io/networks"
NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"


def is_instance_manager_pod(pod: Obj) -> bool:
    return (pod["metadata"].get("labels") or {}).get("longhorn.io/component") == IM_COMPONENT


def bound_misfit(pod: Obj, ctx: ReconcileContext) -> str | None:
    """Why a pod bound by `nodeName` cannot run there (nodeSelector, NoExecute), None if it can or
    if the node is unknown to the simulator."""
    node = ctx.view.get("kubenode", str(spec(pod).get("nodeName", "")))
    if node is None:
        return None
    return misfit(spec(pod), node, effects=("NoExecute",))


def unscheduled_status(pod: Obj, message: str, stamp: str) -> dict[str, Any]:
    held: dict[str, Any] = next(
        (c for c in status(pod).get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    since = held.get("lastTransitionTime") if held.get("status") == "False" else stamp
    return {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": message,
                "lastTransitionTime": since or stamp,
            }
        ],
    }


def reconcile_kube_pods(ctx: ReconcileContext) -> None:
    if not ctx.config.kube_workloads:
        return
    nodes = [n for n in ctx.view.all("kubenode") if not deleting(n)]
    for pod in ctx.view.all("pod"):
        if deleting(pod) or is_instance_manager_pod(pod):
            continue
        with ctx.isolated("pod", pod):
            if not spec(pod).get("nodeName"):
                _schedule(ctx, pod, nodes)
            else:
                _run(ctx, pod, nodes)


def _schedule(ctx: ReconcileContext, pod: Obj, nodes: list[Obj]) -> None:
    reasons = []
    for node in nodes:
        reason = misfit(spec(pod), node)
        if reason is None:
            ctx.patch_spec("pod", pod, {"nodeName": node["metadata"]["name"]}, "scheduled")
            ctx.patch_status(
                "pod",
                pod,
                {
                    "phase": "Pending",
                    "conditions": [
                        {"type": "PodScheduled", "status": "True", "lastTransitionTime": ctx.stamp}
                    ],
                },
                "scheduled",
            )
            return
        reasons.append(reason)
    message = unschedulable_message(reasons, len(nodes))
    ctx.patch_status("pod", pod, unscheduled_status(pod, message, ctx.stamp), "no node fits")


def _run(ctx: ReconcileContext, pod: Obj, nodes: list[Obj]) -> None:
    reason = bound_misfit(pod, ctx)
    if reason is not None:
        ctx.patch_status(
            "pod", pod, unscheduled_status(pod, f"0/1 nodes are available: 1 {reason}.", ctx.stamp), "misfit"
        )
        return
    if status(pod).get("phase") == "Running":
        return
    uid = pod["metadata"].get("uid", "")
    if not ctx.waited(f"pod-start/{uid}", ctx.config.pod_startup_seconds):
        return
    node = str(spec(pod)["nodeName"])
    names = [n["metadata"]["name"] for n in nodes]
    index = names.index(node) + 1 if node in names else zlib.crc32(node.encode()) % 250 + 1
    ip = f"10.42.{index}.{ctx.rng.randint(2, 254)}"
    network = _network_status(pod, ip, index, ctx)
    if network is not None:
        # the whole map: a nested dict in `wanted` stands for the whole field (writes.merge_diff)
        annotations = {**(pod["metadata"].get("annotations") or {}), NETWORK_STATUS: network}
        ctx.patch_metadata("pod", pod, {"annotations": annotations}, "network attached")
    containers = [
        {
            "name": c.get("name", ""),
            "image": c.get("image", ""),
            "imageID": c.get("image", ""),
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": ctx.stamp}},
        }
        for c in spec(pod).get("containers") or []
    ]
    ctx.patch_status(
        "pod",
        pod,
        {
            "phase": "Running",
            "podIP": ip,
            "hostIP": f"10.0.0.{index}",
            "startTime": ctx.stamp,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": ctx.stamp},
                {"type": "Ready", "status": "True", "lastTransitionTime": ctx.stamp},
            ],
            "containerStatuses": containers,
        },
        "pod running",
    )


def _network_status(pod: Obj, ip: str, index: int, ctx: ReconcileContext) -> str | None:
    raw = (pod["metadata"].get("annotations") or {}).get(NETWORKS)
    if not raw:
        return None
    try:
        attached = json.loads(raw)
    except json.JSONDecodeError:
        return None
    entries: list[dict[str, Any]] = [{"name": "cbr0", "interface": "eth0", "ips": [ip], "default": True}]
    for item in attached if isinstance(attached, list) else []:
        name = f"{item.get('namespace', '')}/{item.get('name', '')}"
        address = f"192.168.{index}.{ctx.rng.randint(2, 254)}"
        entries.append({"name": name, "interface": item.get("interface", ""), "ips": [address]})
    return json.dumps(entries)
