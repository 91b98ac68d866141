"""SIM-K8S placement: whether a pod may run on a node, as kube-scheduler's NodeName, NodeAffinity
(nodeSelector and a DaemonSet pod's `matchFields metadata.name`), NodeUnschedulable and
TaintToleration filters decide it, with their messages.

Pure rules over raw objects, shared by the scheduler and kubelet (kube_pods.py: a pod bound by
`nodeName` to a node its nodeSelector excludes stays Pending, where a real kubelet would fail it
with NodeAffinity) and the DaemonSet controller (which nodes "should run" a daemon pod).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Obj = dict[str, Any]
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

NODE_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE = "node(s) were unschedulable"


def node_taints(kube_node: Obj) -> list[Obj]:
    """The node's taints; a cordoned node (`spec.unschedulable`) carries Kubernetes' own taint."""
    spec = kube_node.get("spec") or {}
    taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    if spec.get("unschedulable") and not any(t.get("key") == UNSCHEDULABLE_TAINT for t in taints):
        taints.append({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
    return taints


def tolerates(tolerations: Iterable[Obj], taint: Obj) -> bool:
    """`Toleration.ToleratesTaint`: same effect (or none), and Exists on the key (an empty key with
    Exists tolerates everything) or Equal on key and value."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def _affinity_nodes(pod_spec: Obj) -> list[str] | None:
    """The node names a `matchFields metadata.name In [...]` node affinity allows (DaemonSet pods)."""
    affinity = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    names: list[str] | None = None
    for term in affinity.get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In":
                names = (names or []) + list(field.get("values") or [])
    return names


def misfit(pod_spec: Obj, kube_node: Obj, *, effects: tuple[str, ...] = BLOCKING_EFFECTS) -> str | None:
    """Why a pod with this spec cannot run on the node (the scheduler's reason), None if it can.

    `effects`: the taint effects that keep the pod off (a pod bound by `nodeName` meets only
    NoExecute, which would evict it)."""
    name = kube_node.get("metadata", {}).get("name", "")
    labels = kube_node.get("metadata", {}).get("labels") or {}
    selector = pod_spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return NODE_SELECTOR
    allowed = _affinity_nodes(pod_spec)
    if allowed is not None and name not in allowed:
        return NODE_SELECTOR
    tolerations = pod_spec.get("tolerations") or []
    for taint in node_taints(kube_node):
        if taint.get("effect") in effects and not tolerates(tolerations, taint):
            if taint.get("key") == UNSCHEDULABLE_TAINT:
                return UNSCHEDULABLE
            value = f": {taint['value']}" if taint.get("value") else ""
            return f"node(s) had untolerated taint {{{taint.get('key', '')}{value}}}"
    return None


def unschedulable_message(reasons: Iterable[str], total: int) -> str:
    """kube-scheduler's FailedScheduling text: `0/3 nodes are available: 3 node(s) didn't match …`."""
    counts: dict[str, int] = {}
    for reason in reasons:
        counts[reason] = counts.get(reason, 0) + 1
    detail = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
    return f"0/{total} nodes are available: {detail}." if detail else f"0/{total} nodes are available."
