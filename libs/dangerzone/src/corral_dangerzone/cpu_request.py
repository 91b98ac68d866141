"""The instance-manager pod's CPU request (§4.4, `GetInstanceManagerCPURequirement`).

A node's non-zero `spec.instanceManagerCPURequest` (millicpu) overrides the percentage setting for
that node only; otherwise the request is the setting's percentage of the Kubernetes node's
allocatable CPU, rounded half away from zero. For v2 with a number of CPU cores set, the request
becomes whole cores, at least that many. Both the pod builder and the "synced" check use this, so
they can never disagree.
"""

from __future__ import annotations

import math

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.quantity import milli_value, same_quantity
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.table import SettingName
from corral_model.longhorn import KubeNode, Node


def _round_half_away(x: float) -> int:
    """Go's `math.Round` (Python's `round` rounds half to even)."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def allocatable_millicpu(kube_node: KubeNode | None) -> int:
    """`Allocatable.Cpu().MilliValue()`: 0 when the node or its allocatable CPU is unknown."""
    if kube_node is None:
        return 0
    cpu = kube_node.status.allocatable.get("cpu")
    return milli_value(cpu) if cpu else 0


def instance_manager_cpu_request(
    data_engine: str, settings: DangerZoneSettings, node: Node | None, kube_node: KubeNode | None
) -> str | None:
    """The CPU request quantity the IM pod must carry (`"150m"`, `"2"`), or None for no request."""
    if data_engine not in ("v1", "v2"):
        raise SettingValueError(f"unknown data engine {data_engine}")
    millicpu = node.spec.instance_manager_cpu_request if node is not None else 0
    quantity = f"{millicpu}m"
    if millicpu == 0:
        percent = settings.for_engine(
            settings.guaranteed_instance_manager_cpu, SettingName.GUARANTEED_INSTANCE_MANAGER_CPU, data_engine
        )
        assert isinstance(percent, float)
        millicpu = _round_half_away(float(allocatable_millicpu(kube_node)) * percent / 100.0)
        quantity = f"{millicpu}m"
    if data_engine == "v2":
        cores = settings.for_engine(
            settings.number_of_cpu_cores, SettingName.DATA_ENGINE_NUMBER_OF_CPU_CORES, data_engine
        )
        assert isinstance(cores, int)
        if cores > 0:
            whole = cores if millicpu < cores * 1000 else (millicpu - 1) // 1000 + 1
            quantity = str(whole)
    return None if same_quantity(quantity, "0") else quantity


def same_cpu_request(a: str | None, b: str | None) -> bool:
    """`IsSameGuaranteedCPURequirement`: equal as quantities, a missing request being 0."""
    return same_quantity(a, b)
