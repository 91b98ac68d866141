"""The simulator's picture of the cluster: raw Kubernetes objects (plain JSON dicts) by kind and name,
fed by list+watch and by the responses to its own writes.

Raw dicts rather than typed Structs because the simulator writes fields corral never reads
(`spec.active`, `replicaAddressMap`, …) and must not lose them on a round trip. Each update is kept
only if its resourceVersion is not older than what is held, so a late watch event never rolls the
view back behind a write response.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from corral_sandbox.simulator.settings import DEFAULTS

Obj = dict[str, Any]

# The kinds the simulator follows: token → (group, version, plural, namespaced).
KINDS: dict[str, tuple[str, str, str, bool]] = {
    "volume": ("longhorn.io", "v1beta2", "volumes", True),
    "engine": ("longhorn.io", "v1beta2", "engines", True),
    "replica": ("longhorn.io", "v1beta2", "replicas", True),
    "engineimage": ("longhorn.io", "v1beta2", "engineimages", True),
    "node": ("longhorn.io", "v1beta2", "nodes", True),
    "setting": ("longhorn.io", "v1beta2", "settings", True),
    "instancemanager": ("longhorn.io", "v1beta2", "instancemanagers", True),
    "pod": ("", "v1", "pods", True),
    "kubenode": ("", "v1", "nodes", False),
    # SIM-K8S (kube_workloads.py)
    "daemonset": ("apps", "v1", "daemonsets", True),
    "deployment": ("apps", "v1", "deployments", True),
    "priorityclass": ("scheduling.k8s.io", "v1", "priorityclasses", False),
    "configmap": ("", "v1", "configmaps", True),
    "volumeattachment": ("longhorn.io", "v1beta2", "volumeattachments", True),
    # SIM-V2 (upgrade_signals.py, snapshots.py)
    "snapshot": ("longhorn.io", "v1beta2", "snapshots", True),
    "nodedataengineupgrade": ("corral.longhorn.io", "v1alpha1", "nodedataengineupgrades", True),
}

KIND_NAMES: dict[str, str] = {
    "volume": "Volume",
    "engine": "Engine",
    "replica": "Replica",
    "engineimage": "EngineImage",
    "node": "Node",
    "setting": "Setting",
    "instancemanager": "InstanceManager",
    "pod": "Pod",
    "kubenode": "Node",
    "daemonset": "DaemonSet",
    "deployment": "Deployment",
    "priorityclass": "PriorityClass",
    "configmap": "ConfigMap",
    "volumeattachment": "VolumeAttachment",
    "snapshot": "Snapshot",
    "nodedataengineupgrade": "NodeDataEngineUpgrade",
}


def api_version(kind: str) -> str:
    group, version, _, _ = KINDS[kind]
    return f"{group}/{version}" if group else version


def resource_version(obj: Obj) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion", "0") or 0)
    except ValueError:
        return 0


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def spec(obj: Obj) -> dict[str, Any]:
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def status(obj: Obj) -> dict[str, Any]:
    value = obj.get("status")
    return value if isinstance(value, dict) else {}


def deleting(obj: Obj) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


@dataclass
class ClusterView:
    """Objects by kind and name. Mutated only through `upsert`/`remove` so the rv rule holds."""

    objects: dict[str, dict[str, Obj]]
    _gone: dict[str, dict[str, int]]
    # names per kind in sorted order, rebuilt only when a name comes or goes (every round walks them)
    _order: dict[str, list[str] | None]

    @classmethod
    def empty(cls) -> ClusterView:
        return cls({kind: {} for kind in KINDS}, {kind: {} for kind in KINDS}, dict.fromkeys(KINDS))

    def upsert(self, kind: str, obj: Obj) -> bool:
        """Keep `obj` unless an equal-or-newer version (or its deletion) is already known."""
        name = name_of(obj)
        rv = resource_version(obj)
        if rv and rv <= self._gone[kind].get(name, 0):
            return False
        held = self.objects[kind].get(name)
        if held is not None and rv and rv < resource_version(held):
            return False
        if held is None:
            self._order[kind] = None
        self.objects[kind][name] = obj
        return True

    def remove(self, kind: str, name: str, rv: int = 0) -> None:
        held = self.objects[kind].pop(name, None)
        if held is not None:
            self._order[kind] = None
        last = max(rv, resource_version(held) if held else 0)
        if last:
            self._gone[kind][name] = last

    def replace_kind(self, kind: str, items: list[Obj]) -> None:
        """A fresh list: what it holds is the truth for this kind."""
        self.objects[kind] = {name_of(o): o for o in items}
        self._gone[kind] = {}
        self._order[kind] = None

    def get(self, kind: str, name: str) -> Obj | None:
        return self.objects[kind].get(name)

    def all(self, kind: str) -> list[Obj]:
        """Objects of a kind, sorted by name so every decision walks them in the same order."""
        held = self.objects[kind]
        return [held[n] for n in self._sorted(kind)]

    def names(self, kind: str) -> Iterator[str]:
        return iter(self._sorted(kind))

    def _sorted(self, kind: str) -> list[str]:
        order = self._order[kind]
        if order is None:
            order = self._order[kind] = sorted(self.objects[kind])
        return order

    def setting(self, name: str, default: str | None = None) -> str:
        """A setting's value; Longhorn's default when the Setting object is missing."""
        if default is None:
            default = DEFAULTS.get(name, "")
        obj = self.objects["setting"].get(name)
        if obj is None:
            return default
        return str(obj.get("value", default))
