"""SIM-K8S: the DaemonSet and Deployment controllers of kube-controller-manager, enough for the
danger-zone scenarios: a changed pod template rolls the pods, and the status reports the rollout
the way Longhorn's tests read it (`updatedNumberScheduled`, `updatedReplicas`, `observedGeneration`).

* A pod belongs to its workload by owner reference; it carries the template's hash as
  `controller-revision-hash` (DaemonSet) or `pod-template-hash` (Deployment). A pod with another
  hash is old: it is deleted and a pod of the current template replaces it.
* DaemonSet: one pod per node that should run it (placement.py: node selector and taints, a
  cordon ignored, as the real controller does), pinned with a `matchFields metadata.name` node
  affinity and tolerating `node.kubernetes.io/unschedulable`; the scheduler (kube_pods.py) binds it.
* Deployment: `spec.replicas` pods, placed by the scheduler.
* A pod whose PriorityClass does not exist is not created (the API server would refuse it): a
  Deployment reports `ReplicaFailure` with the API server's message; a DaemonSet just stays short.
* Pods of a workload that no longer exists are deleted (the garbage collector's job).

Simplifications, on purpose: every old pod is replaced in the same round (no maxUnavailable /
maxSurge pacing) and Deployments own their pods directly (no ReplicaSet objects).
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections import defaultdict
from typing import Any

from corral_sandbox.simulator.conditions import condition
from corral_sandbox.simulator.context import ReconcileContext
from corral_sandbox.simulator.placement import UNSCHEDULABLE_TAINT, misfit
from corral_sandbox.simulator.view import Obj, deleting, spec, status

DS_HASH = "controller-revision-hash"
DEPLOY_HASH = "pod-template-hash"
_KINDS = {"daemonset": "DaemonSet", "deployment": "Deployment"}


def template_hash(template: Obj) -> str:
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def owner_of(pod: Obj) -> tuple[str, str] | None:
    """(kind token, name) of the DaemonSet or Deployment that owns the pod."""
    for ref in pod.get("metadata", {}).get("ownerReferences") or []:
        for token, kind in _KINDS.items():
            if ref.get("kind") == kind:
                return token, str(ref.get("name", ""))
    return None


def reconcile_rollouts(ctx: ReconcileContext) -> None:
    if not ctx.config.kube_workloads:
        return
    owned: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for pod in ctx.view.all("pod"):
        owner = owner_of(pod)
        if owner is None:
            continue
        if ctx.view.get(*owner) is None:
            if not deleting(pod):
                ctx.delete("pod", pod, f"garbage collection: {owner[0]} {owner[1]} is gone")
            continue
        owned[owner].append(pod)
    nodes = [n for n in ctx.view.all("kubenode") if not deleting(n)]
    for ds in ctx.view.all("daemonset"):
        with ctx.isolated("daemonset", ds):
            _daemonset(ctx, ds, owned[("daemonset", ds["metadata"]["name"])], nodes)
    for deployment in ctx.view.all("deployment"):
        with ctx.isolated("deployment", deployment):
            _deployment(ctx, deployment, owned[("deployment", deployment["metadata"]["name"])])


def _missing_priority_class(ctx: ReconcileContext, template: Obj) -> str | None:
    name = (template.get("spec") or {}).get("priorityClassName") or ""
    if name and ctx.view.get("priorityclass", name) is None:
        return f"no PriorityClass with name {name} was found"
    return None


def _new_pod(ctx: ReconcileContext, workload: Obj, kind: str, digest: str, name: str) -> Obj:
    template = copy.deepcopy(spec(workload).get("template") or {})
    meta = template.get("metadata") or {}
    label = DS_HASH if kind == "daemonset" else DEPLOY_HASH
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ctx.namespace,
            "labels": {**(meta.get("labels") or {}), label: digest},
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": _KINDS[kind],
                    "name": workload["metadata"]["name"],
                    "uid": workload["metadata"].get("uid", ""),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template.get("spec") or {},
    }


def _hash_of(pod: Obj, label: str) -> str:
    return str((pod["metadata"].get("labels") or {}).get(label, ""))


def _ready(pod: Obj) -> bool:
    return status(pod).get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status(pod).get("conditions") or []
    )


def _daemonset(ctx: ReconcileContext, ds: Obj, pods: list[Obj], nodes: list[Obj]) -> None:
    name = ds["metadata"]["name"]
    template = spec(ds).get("template") or {}
    digest = template_hash(template)
    pod_spec = template.get("spec") or {}
    # the real controller ignores a cordon (daemon pods tolerate node.kubernetes.io/unschedulable)
    daemon_spec = {
        **pod_spec,
        "tolerations": [
            *(pod_spec.get("tolerations") or []),
            {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
        ],
    }
    wanted = [n["metadata"]["name"] for n in nodes if misfit(daemon_spec, n) is None]
    by_node: dict[str, list[Obj]] = defaultdict(list)
    for pod in pods:
        if not deleting(pod):
            by_node[_daemon_node(pod)].append(pod)
    blocked = _missing_priority_class(ctx, template)
    updated = ready = scheduled = misscheduled = 0
    for node, held in by_node.items():
        if node not in wanted:
            misscheduled += len(held)
            for pod in held:
                ctx.delete("pod", pod, f"daemon pod no longer wanted on {node}")
    for node in wanted:
        held = by_node.get(node, [])
        current = [p for p in held if _hash_of(p, DS_HASH) == digest]
        for pod in held:
            if pod not in current[:1]:
                ctx.delete("pod", pod, "daemon pod of an old template")
        if held:
            scheduled += 1
        if current:
            updated += 1
            ready += int(_ready(current[0]))
        elif not held and blocked is None:
            pod = _new_pod(ctx, ds, "daemonset", digest, f"{name}-{ctx.new_suffix()[:5]}")
            pod["spec"]["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                        ]
                    }
                }
            }
            pod["spec"]["tolerations"] = daemon_spec["tolerations"]
            ctx.create("pod", pod, f"daemon pod for {node}")
    ctx.patch_status(
        "daemonset",
        ds,
        {
            "desiredNumberScheduled": len(wanted),
            "currentNumberScheduled": scheduled,
            "updatedNumberScheduled": updated,
            "numberReady": ready,
            "numberAvailable": ready,
            "numberUnavailable": len(wanted) - ready,
            "numberMisscheduled": misscheduled,
            "observedGeneration": ds["metadata"].get("generation", 1),
        },
        "daemon set status",
    )


def _daemon_node(pod: Obj) -> str:
    if spec(pod).get("nodeName"):
        return str(spec(pod)["nodeName"])
    terms = (
        ((spec(pod).get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return str(field["values"][0])
    return ""


def _deployment(ctx: ReconcileContext, deployment: Obj, pods: list[Obj]) -> None:
    name = deployment["metadata"]["name"]
    template = spec(deployment).get("template") or {}
    digest = template_hash(template)
    replicas = int(spec(deployment).get("replicas", 1) if spec(deployment).get("replicas") is not None else 1)
    live = [p for p in pods if not deleting(p)]
    current = [p for p in live if _hash_of(p, DEPLOY_HASH) == digest]
    for pod in live:
        if pod not in current[:replicas]:
            ctx.delete("pod", pod, "pod of an old template (or one too many)")
    blocked = _missing_priority_class(ctx, template)
    if blocked is None:
        for _ in range(replicas - len(current)):
            pod_name = f"{name}-{digest}-{ctx.new_suffix()[:5]}"
            ctx.create("pod", _new_pod(ctx, deployment, "deployment", digest, pod_name), "replica missing")
    kept = current[:replicas]
    ready = sum(1 for p in kept if _ready(p))
    conditions = [
        condition(
            status(deployment).get("conditions"),
            "Available",
            "True" if ready >= replicas else "False",
            reason="MinimumReplicasAvailable" if ready >= replicas else "MinimumReplicasUnavailable",
            stamp=ctx.stamp,
        )
    ]
    if blocked is not None:
        message = f'pods "{name}-{digest}-" is forbidden: {blocked}'
        conditions.append(
            condition(
                status(deployment).get("conditions"),
                "ReplicaFailure",
                "True",
                reason="FailedCreate",
                message=message,
                stamp=ctx.stamp,
            )
        )
    wanted: dict[str, Any] = {
        "replicas": len(live),
        "updatedReplicas": len(kept),
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(replicas - ready, 0),
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "conditions": conditions,
    }
    ctx.patch_status("deployment", deployment, wanted, "deployment status")
