"""Longhorn's settings as the simulated controllers read them: the default values (so a seed or a
missing Setting object still yields Longhorn's behaviour) and the value syntax the instance-manager
pod builder needs (tolerations, node selector, data-engine-specific JSON values, the CPU formula).

Rules from longhorn-behaviour.md §3.1, §3.4 and §4.4.
"""

from __future__ import annotations

import json
import math
from typing import Any

LONGHORN_VERSION = "v1.10.0"
DEFAULT_ENGINE_IMAGE = "longhornio/longhorn-engine:v1.10.0"
DEFAULT_INSTANCE_MANAGER_IMAGE = "longhornio/longhorn-instance-manager:v1.10.0"

# Danger-zone settings (category "danger Zone") at HEAD, with their defaults.
DANGER_ZONE: dict[str, str] = {
    "taint-toleration": "",
    "system-managed-components-node-selector": "",
    "system-managed-csi-components-resource-limits": "",
    "priority-class": "",
    "concurrent-replica-rebuild-per-node-limit": "5",
    "concurrent-backing-image-replenish-per-node-limit": "5",
    "guaranteed-instance-manager-cpu": '{"v1":"12","v2":"12"}',
    "storage-network": "",
    "endpoint-network-for-rwx-volume": "",
    "v1-data-engine": "true",
    "v2-data-engine": "false",
    "data-engine-hugepage-enabled": '{"v2":"true"}',
    "data-engine-memory-size": '{"v2":"2048"}',
    "data-engine-iobuf-large-pool-size": '{"v2":"1024"}',
    "data-engine-iobuf-small-pool-size": '{"v2":"8192"}',
    "data-engine-cpu-mask": '{"v2":"0x3"}',
    "data-engine-number-of-cpu-cores": '{"v2":"0"}',
    "data-engine-interrupt-mode-enabled": '{"v2":"false"}',
    "data-engine-cpu-isolation-enabled": '{"v2":"true"}',
    "disable-snapshot-purge": "false",
    "engine-image-pod-liveness-probe-period": "5",
    "engine-image-pod-liveness-probe-timeout": "4",
    "engine-image-pod-liveness-probe-failure-threshold": "3",
    "instance-manager-pod-liveness-probe-timeout": "10",
    "log-path": "/var/lib/longhorn/logs",
}

GENERAL: dict[str, str] = {
    "default-engine-image": DEFAULT_ENGINE_IMAGE,
    "default-instance-manager-image": DEFAULT_INSTANCE_MANAGER_IMAGE,
    "current-longhorn-version": LONGHORN_VERSION,
    "concurrent-automatic-engine-upgrade-per-node-limit": "0",
    "allow-live-engine-upgrade-on-same-image-commit": "false",
    "kubernetes-cluster-autoscaler-enabled": "false",
    "auto-salvage": "true",
    "default-replica-count": '{"v1":"3","v2":"3"}',
    "replica-soft-anti-affinity": "false",
    "log-level": "Info",
    "auto-cleanup-system-generated-snapshot": "true",
}

DEFAULTS: dict[str, str] = {**GENERAL, **DANGER_ZONE}

# Settings the manager owns; a user update is refused unless the manager's annotation is present.
READ_ONLY = frozenset({"default-engine-image", "default-instance-manager-image", "current-longhorn-version"})

STORAGE_NETWORK_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
LAST_APPLIED_TOLERATIONS = "longhorn.io/last-applied-tolerations"


def data_engine_value(raw: str, data_engine: str) -> str:
    """A data-engine-specific value for one engine; a plain scalar applies to every engine."""
    text = raw.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return ""
        return str(parsed.get(data_engine, "")) if isinstance(parsed, dict) else ""
    return text


def parse_tolerations(raw: str) -> list[dict[str, str]]:
    """`key[=value]:effect;…` → Kubernetes tolerations (invalid items are skipped here; admission
    is where Longhorn refuses them)."""
    text = raw.replace(" ", "")
    if not text:
        return []
    tolerations: list[dict[str, str]] = []
    seen: set[tuple[str, str, str, str]] = set()
    for item in text.split(";"):
        if item.count(":") != 1:
            continue
        key_value, effect = item.split(":")
        if "=" in key_value:
            key, _, value = key_value.partition("=")
            toleration = {"key": key, "operator": "Equal", "value": value, "effect": effect}
        else:
            toleration = {"key": key_value, "operator": "Exists", "effect": effect}
        identity = (toleration["key"], toleration["operator"], toleration.get("value", ""), effect)
        if identity not in seen:
            seen.add(identity)
            tolerations.append({k: v for k, v in toleration.items() if v})
    return tolerations


def parse_node_selector(raw: str) -> dict[str, str]:
    selector: dict[str, str] = {}
    for item in raw.strip().split(";"):
        if item.count(":") != 1:
            continue
        key, value = item.split(":")
        if key.strip():
            selector[key.strip()] = value.strip()
    return selector


def storage_network_annotation(raw: str) -> str:
    if not raw.strip() or raw.count("/") != 1:
        return ""
    namespace, name = raw.strip().split("/")
    return json.dumps([{"namespace": namespace, "name": name, "interface": "lhnet1"}])


def parse_millicpu(quantity: str) -> int:
    """A CPU quantity (`4`, `3500m`, `0.5`) in millicpu."""
    text = str(quantity).strip()
    if not text:
        return 0
    if text.endswith("m"):
        return int(float(text[:-1]))
    return round(float(text) * 1000)


def instance_manager_cpu_millis(
    node_cpu_request: int, allocatable_millicpu: int, guaranteed: str, data_engine: str, cores: str = "0"
) -> int:
    """GetInstanceManagerCPURequirement (§4.4): the IM pod's CPU request in millicpu (0 = none)."""
    if node_cpu_request:
        request = node_cpu_request
    else:
        try:
            percent = float(data_engine_value(guaranteed, data_engine) or 0)
        except ValueError:
            percent = 0.0
        request = round(allocatable_millicpu * percent / 100)
    if data_engine == "v2":
        try:
            number = int(data_engine_value(cores, "v2") or 0)
        except ValueError:
            number = 0
        if number > 0:
            request = max(number, math.ceil(request / 1000)) * 1000
    return request


def cpu_quantity(millis: int) -> str:
    return f"{millis // 1000}" if millis % 1000 == 0 else f"{millis}m"


def as_int(raw: str, default: int) -> int:
    try:
        return int(raw.strip())
    except (ValueError, AttributeError):
        return default


def as_bool(raw: str) -> bool:
    return raw.strip().lower() == "true"


def setting_object(name: str, value: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Setting",
        "metadata": {"name": name, "namespace": namespace},
        "value": value,
        "status": {"applied": True},
    }
