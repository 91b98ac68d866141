"""SIM-K8S PriorityClasses: kube-apiserver's built-in classes and its Priority admission plugin.

* `system-cluster-critical` (2000000000) and `system-node-critical` (2000001000) exist in every
  cluster (the API server creates them at start-up); `install` loads them.
* A pod naming a PriorityClass gets `spec.priority` from it; one naming a class that does not exist
  is refused ("no PriorityClass with name X was found"), which is why a DaemonSet whose template
  names a missing class stays short of pods (Longhorn's manual test priorityclass-default-setting).
"""

from __future__ import annotations

from typing import Any, Protocol

from corral_sandbox.simulator.admission import ClusterLookup

Obj = dict[str, Any]
SCHEDULING = "scheduling.k8s.io"
BUILT_IN = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}


class Hooks(Protocol):
    def register_admission(
        self, group: str, plural: str, fn: Any, *, name: str = "", code: int = 400
    ) -> None: ...

    def register_mutation(self, group: str, plural: str, fn: Any, *, name: str = "") -> None: ...

    def load(self, group: str, plural: str, objects: Any) -> int: ...


def priority_class(name: str, value: int, description: str = "") -> Obj:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": description,
    }


class PriorityAdmission:
    def __init__(self, cluster: ClusterLookup) -> None:
        self._cluster = cluster

    def install(self, hooks: Hooks) -> None:
        hooks.load(
            SCHEDULING,
            "priorityclasses",
            [priority_class(n, v, "built-in") for n, v in BUILT_IN.items()],
        )
        hooks.register_mutation("", "pods", self.mutate, name="Priority")
        hooks.register_admission("", "pods", self.validate, name="Priority", code=403)

    def _value(self, name: str) -> int | None:
        found = self._cluster.get(SCHEDULING, "priorityclasses", "", name)
        return None if found is None else int(found.get("value", 0) or 0)

    def mutate(self, operation: str, old: Obj | None, new: Obj | None) -> Obj | None:
        if operation != "CREATE" or new is None:
            return None
        name = (new.get("spec") or {}).get("priorityClassName") or ""
        value = self._value(name) if name else 0
        if value is None:
            return None
        return {**new, "spec": {**(new.get("spec") or {}), "priority": value}}

    def validate(self, operation: str, old: Obj | None, new: Obj | None) -> str | None:
        if operation != "CREATE" or new is None:
            return None
        name = (new.get("spec") or {}).get("priorityClassName") or ""
        if name and self._value(name) is None:
            return f"no PriorityClass with name {name} was found"
        return None
