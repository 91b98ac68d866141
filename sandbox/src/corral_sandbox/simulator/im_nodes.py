"""SIM-IM's node side: what a Kubernetes node says about the instance managers it may hold.

* **Cordoned** (`spec.unschedulable`): Longhorn's IM controller creates no pod there and says so
  in the IM's NodeReady condition (`Unschedulable`, §4.3 step 9); running pods stay.
* **v2 disabled** (label `node.longhorn.io/disable-v2-data-engine=true`, T4.6): no v2 IM there;
  an idle one is removed, and labelling a node that hosts a v2 engine or replica is refused
  (`node_admission.py`).
* **Excluded by the node selector** (`system-managed-components-node-selector`, IM-10): no new
  IM on a node whose labels do not match it; an idle one there is removed, a busy one kept.
* **Room for the pod**: allocatable CPU and `hugepages-2Mi`. An IM pod whose CPU request or
  hugepage limit does not fit beside the IM pods already running on its node stays Pending with
  `PodScheduled=False` (`Insufficient cpu`, IM-09), and starts once room is made. A node that
  reports no `hugepages-2Mi` at all (the default seeds' nodes) is not checked for hugepages;
  corral's hugepage check still reads it as no capacity (IM-12). Enabling v2 needs hugepages on
  every node all the same: Longhorn's setting webhook asks for them (setting_webhooks.py).
* **The CPU request's inputs**: the node's allocatable CPU and the Longhorn node's
  `spec.instanceManagerCPURequest` override (§4.4).
"""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator.settings import as_bool, parse_millicpu, parse_node_selector
from corral_sandbox.simulator.view import ClusterView, Obj, deleting, spec, status

DISABLE_V2_LABEL = "node.longhorn.io/disable-v2-data-engine"
IM_COMPONENT = "instance-manager"
HUGEPAGES = "hugepages-2Mi"


def cordoned(view: ClusterView, node: str) -> bool:
    kube_node = view.get("kubenode", node)
    return kube_node is not None and bool(spec(kube_node).get("unschedulable"))


def v2_disabled(view: ClusterView, node: str) -> bool:
    kube_node = view.get("kubenode", node)
    labels = (kube_node or {}).get("metadata", {}).get("labels", {}) or {}
    return as_bool(str(labels.get(DISABLE_V2_LABEL, "")))


def excluded_by_selector(view: ClusterView, node: str) -> bool:
    selector = parse_node_selector(view.setting("system-managed-components-node-selector"))
    if not selector:
        return False
    kube_node = view.get("kubenode", node)
    labels = (kube_node or {}).get("metadata", {}).get("labels", {}) or {}
    return any(labels.get(key) != value for key, value in selector.items())


def allocatable_millicpu(view: ClusterView, node: str, default: int) -> int:
    kube_node = view.get("kubenode", node)
    cpu = status(kube_node).get("allocatable", {}).get("cpu") if kube_node is not None else None
    return parse_millicpu(cpu) if cpu else default


def node_cpu_request(view: ClusterView, node: str) -> int:
    """The per-node override `spec.instanceManagerCPURequest` (millicpu; 0: use the setting)."""
    lh_node = view.get("node", node)
    return int(spec(lh_node).get("instanceManagerCPURequest", 0) or 0) if lh_node else 0


def quantity_bytes(text: str) -> float:
    """A memory quantity (`2Gi`, `2048Mi`, `0`) in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    text = str(text).strip()
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)] or 0) * factor
    return float(text or 0)


def _needs(pod: Obj) -> tuple[int, float]:
    container = (pod.get("spec", {}).get("containers") or [{}])[0]
    resources = container.get("resources", {}) or {}
    cpu = (resources.get("requests", {}) or {}).get("cpu", "")
    hugepages = (resources.get("limits", {}) or {}).get(HUGEPAGES, "0")
    return parse_millicpu(cpu) if cpu else 0, quantity_bytes(hugepages)


def _room(view: ClusterView, node: str, default_millicpu: int) -> tuple[int, float | None]:
    kube_node = view.get("kubenode", node)
    allocatable: dict[str, Any] = status(kube_node).get("allocatable", {}) if kube_node else {}
    capacity: dict[str, Any] = status(kube_node).get("capacity", {}) if kube_node else {}
    hugepages = allocatable.get(HUGEPAGES, capacity.get(HUGEPAGES))
    cpu = allocatable_millicpu(view, node, default_millicpu)
    return cpu, quantity_bytes(hugepages) if hugepages is not None else None


def unfit_reason(view: ClusterView, pod: Obj, default_millicpu: int) -> str:
    """Why the pod cannot start on its node beside the IM pods running there ("" when it fits)."""
    node = pod.get("spec", {}).get("nodeName", "")
    cpu_free, hugepages_free = _room(view, node, default_millicpu)
    name = pod["metadata"]["name"]
    for other in view.all("pod"):
        labels = other["metadata"].get("labels", {}) or {}
        if (
            other["metadata"]["name"] == name
            or labels.get("longhorn.io/component") != IM_COMPONENT
            or other.get("spec", {}).get("nodeName", "") != node
            or status(other).get("phase") != "Running"
            or deleting(other)
        ):
            continue
        cpu, hugepages = _needs(other)
        cpu_free -= cpu
        if hugepages_free is not None:
            hugepages_free -= hugepages
    cpu, hugepages = _needs(pod)
    if cpu > cpu_free:
        return "Insufficient cpu"
    if hugepages and hugepages_free is not None and hugepages > hugepages_free:
        return f"Insufficient {HUGEPAGES}"
    return ""
