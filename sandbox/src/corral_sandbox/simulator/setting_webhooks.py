"""Longhorn's Setting webhooks (§3.2) as emulator admission hooks, with Longhorn's rules and messages
from `corral_dangerzone` (never re-implemented here):

* mutating (create/update): a danger-zone value is normalised (`normalize_value`: a scalar expanded
  to the default's data engines, numbers re-rendered, a CPU list turned into a hex mask);
* validating:
  * delete: a known setting "can be modified but not deleted"; an unknown (obsolete) one may go;
  * update of a read-only setting (the manager's own: default engine and instance-manager images,
    `current-longhorn-version`): refused unless the old or the new object carries
    `longhorn.io/update-setting-from-longhorn`, as the manager's writes do;
  * a danger-zone value: `validate_with_cluster` over the facts read from the API server's store
    (PriorityClasses, engine instances per data engine, hugepage capacity and CPU policy per node,
    the stored values), so a missing priority class, disabling an engine with engine instances, or
    enabling v2 without hugepages is refused with Longhorn's text.

Status writes are not judged (the setting controller's `status.applied`). Writes through the
emulator's back door (`Emulator.load`, `/_sandbox/load`) bypass every webhook, which is how tests
put a bad value in front of corral.
"""

from __future__ import annotations

from typing import Any, Protocol

from corral_dangerzone import (
    ClusterFacts,
    NodeFacts,
    SettingValueError,
    is_danger_zone,
    normalize_value,
    validate_with_cluster,
)
from corral_sandbox.simulator.admission import AdmissionRegistry, ClusterLookup
from corral_sandbox.simulator.settings import DEFAULTS, READ_ONLY

Obj = dict[str, Any]
LONGHORN = "longhorn.io"
FROM_LONGHORN = "longhorn.io/update-setting-from-longhorn"
V2_DISABLED_LABEL = "node.longhorn.io/disable-v2-data-engine"
WEBHOOK = "validator.longhorn.io"


class MutationRegistry(AdmissionRegistry, Protocol):
    def register_mutation(self, group: str, plural: str, fn: Any, *, name: str = "") -> None: ...


def _name(obj: Obj | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name", ""))


def _from_longhorn(obj: Obj | None) -> bool:
    return FROM_LONGHORN in (((obj or {}).get("metadata") or {}).get("annotations") or {})


class SettingWebhooks:
    def __init__(self, cluster: ClusterLookup, namespace: str) -> None:
        self._cluster = cluster
        self._namespace = namespace

    def install(self, registry: MutationRegistry) -> None:
        registry.register_mutation(LONGHORN, "settings", self.mutate, name="mutator.longhorn.io")
        registry.register_admission(LONGHORN, "settings", self.validate, name=WEBHOOK, code=400)

    def mutate(self, operation: str, old: Obj | None, new: Obj | None) -> Obj | None:
        if operation == "DELETE" or new is None or not is_danger_zone(_name(new)):
            return None
        value = str(new.get("value", ""))
        try:
            normalized = normalize_value(_name(new), value)
        except SettingValueError:
            return None  # the validating webhook refuses it with the message
        if normalized == value:
            return None
        return {**new, "value": normalized}

    def validate(self, operation: str, old: Obj | None, new: Obj | None) -> str | None:
        if operation == "DELETE":
            name = _name(old)
            if name in DEFAULTS or is_danger_zone(name):
                return f"setting {name} can be modified but not deleted"
            return None
        name = _name(new)
        manager = _from_longhorn(old) or _from_longhorn(new)
        changed = str((old or {}).get("value", "")) != str((new or {}).get("value", ""))
        if operation == "UPDATE" and name in READ_ONLY and changed and not manager:
            return f"setting {name} is read-only"
        if not is_danger_zone(name):
            return None
        value = str((new or {}).get("value", ""))
        try:
            validate_with_cluster(name, normalize_value(name, value), self.facts())
        except SettingValueError as error:
            return str(error)
        return None

    def facts(self) -> ClusterFacts:
        """What the datastore checks read, from the API server's current objects."""
        stored = self._cluster.list(LONGHORN, "settings", self._namespace)
        settings = {_name(s): str(s.get("value", "")) for s in stored}
        classes = frozenset(_name(pc) for pc in self._cluster.list("scheduling.k8s.io", "priorityclasses"))
        engines: set[str] = set()
        for im in self._cluster.list(LONGHORN, "instancemanagers", self._namespace):
            ispec, istatus = im.get("spec") or {}, im.get("status") or {}
            if ispec.get("type", "aio") in ("aio", "engine") and (
                istatus.get("instanceEngines") or istatus.get("instanceEngineFrontends")
            ):
                engines.add(str(ispec.get("dataEngine", "v1")))
        kube_nodes = {_name(n): n for n in self._cluster.list("", "nodes")}
        nodes = []
        for node in self._cluster.list(LONGHORN, "nodes", self._namespace):
            name = _name(node)
            kube = kube_nodes.get(name)
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            labels = ((kube or {}).get("metadata") or {}).get("labels") or {}
            capacity = ((kube or {}).get("status") or {}).get("capacity") or {}
            nodes.append(
                NodeFacts(
                    name=name,
                    available=ready,
                    has_kube_node=kube is not None,
                    v2_disabled=labels.get(V2_DISABLED_LABEL) == "true",
                    hugepages_2mi_capacity=capacity.get("hugepages-2Mi"),
                    cpu_policy=str((node.get("status") or {}).get("cpuPolicy", "")),
                )
            )
        return ClusterFacts(
            current_values=settings,
            priority_classes=classes,
            engines_with_instances=frozenset(engines),
            nodes=tuple(nodes),
            auto_cleanup_system_generated_snapshot=settings.get(
                "auto-cleanup-system-generated-snapshot", "true"
            ).lower()
            == "true",
        )
