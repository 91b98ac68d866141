"""What im-restart knows of the cluster: instance managers with their pods, the nodes they run
on, and the danger-zone settings, indexed so one event touches only what it concerns.

* an IM's pod is found by the pod's owner reference (Longhorn names the pod after its IM), so a
  pod event touches one IM;
* IMs are indexed by node name (`spec.nodeID` and the pod's `spec.nodeName`), so a Longhorn or
  Kubernetes node event touches the IMs on that node only;
* a danger-zone setting change touches every IM, but only marks the settings stale: they are
  parsed once, at the next decision, and the judgement per IM is memoised by shape (shapes.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.table import DANGER_ZONE
from corral_decision.expectations import TargetTrack
from corral_im_restart.judge import Judgement, pod_state
from corral_im_restart.shapes import im_shape, node_shape, pod_shape
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.longhorn import InstanceManager, KubeNode, Node, Pod, Setting

ImKey = tuple[str, str]
"""(namespace, name) of an instance manager."""
IM_COMPONENT_LABEL = "longhorn.io/component"
IM_COMPONENT = "instance-manager"
_DANGER_ZONE_NAMES = frozenset(name.value for name in DANGER_ZONE)
_DELETED = EventType.DELETED


class ImRecord:
    """One instance manager, its pod, what it was judged, and what corral has sent about it."""

    __slots__ = (
        "condition",
        "delete",
        "idle_since",
        "im",
        "im_shape",
        "judgement",
        "key",
        "node",
        "pod",
        "pod_node",
        "pod_shape",
        "pod_state",
    )

    def __init__(self, key: ImKey) -> None:
        self.key = key
        self.im: InstanceManager | None = None
        self.pod: Pod | None = None
        self.node = ""
        """The IM's `spec.nodeID` (its Kubernetes node: CPU, hugepages; the limits count per node)."""
        self.pod_node = ""
        """The pod's `spec.nodeName` (its Longhorn node: the guaranteed-CPU check)."""
        self.im_shape = b""
        self.pod_shape = b""
        self.pod_state = ""
        """`judge.pod_state(pod)` of the pod in view ("" without one), computed once per pod event."""
        self.idle_since: float | None = None
        """When it was first judged running and idle (None while busy or not running): an IM idle
        before the latest settings change settles; one that turned idle since restarts at once."""
        self.judgement: Judgement | None = None
        self.delete = TargetTrack()
        """The kit's track of its pod: the delete out, or the hold a refused one left."""
        self.condition = TargetTrack()
        """The kit's track of the IM: the SettingSynced patch out, or a refusal's hold."""

    def rv(self) -> int:
        return _rv(self.im.metadata.resource_version) if self.im is not None else 0

    def pod_rv(self) -> int:
        return _rv(self.pod.metadata.resource_version) if self.pod is not None else 0


def _rv(text: str) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


def is_im_pod(pod: Pod) -> bool:
    return pod.metadata.labels.get(IM_COMPONENT_LABEL) == IM_COMPONENT


def owning_im(pod: Pod) -> str:
    """The IM a pod belongs to: its InstanceManager owner, else its own name (Longhorn's rule)."""
    for owner in pod.metadata.owner_references:
        if owner.kind == "InstanceManager" and owner.name:
            return owner.name
    return pod.metadata.name


def _same_im_facts(old: InstanceManager, new: InstanceManager) -> bool:
    """Nothing a judgement or a condition write reads changed (only the resourceVersion, the IP…)."""
    a, b = old.status, new.status
    return (
        a.current_state == b.current_state
        and a.instance_replicas == b.instance_replicas
        and a.instance_engines == b.instance_engines
        and a.instance_engine_frontends == b.instance_engine_frontends
        and a.conditions == b.conditions
        and a.data_engine_status == b.data_engine_status
        and old.spec == new.spec
    )


def _same_pod_facts(old: Pod, new: Pod, old_state: str, new_state: str) -> bool:
    """Nothing a judgement reads changed (a restart count, the pod IP, the resourceVersion…)."""
    a, b = old.metadata, new.metadata
    return (
        a.uid == b.uid
        and a.deletion_timestamp == b.deletion_timestamp
        and old_state == new_state
        and old.status.phase == new.status.phase
        and old.spec == new.spec
        and a.annotations == b.annotations
    )


class ImView:
    def __init__(self) -> None:
        self.records: dict[ImKey, ImRecord] = {}
        self.nodes: dict[str, Node] = {}
        self.kube_nodes: dict[str, KubeNode] = {}
        self._by_node: dict[str, set[ImKey]] = {}
        self._node_shapes: dict[str, bytes] = {}
        self._pod_owner: dict[tuple[str, str], ImKey] = {}
        """Pod (namespace, name) → its IM's key, for deletions and results naming the pod."""
        self._setting_values: dict[str, str] = {}
        self.settings: DangerZoneSettings | SettingValueError = DangerZoneSettings.defaults()
        self.settings_stale = False
        self.quiet = False

    # --- events -----------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any]) -> Iterable[ImKey] | None:
        """Fold one event in; the IMs it touched (None: every IM, the settings changed). `quiet`
        tells whether the event changed nothing a judgement reads (only resourceVersions moved)."""
        self.quiet = False
        kind, obj, deleted = event.kind, event.object, event.type is _DELETED
        if kind == "instancemanager":
            return self._apply_im(event.namespace, event.name, None if deleted else obj)
        if kind == "pod":
            return self._apply_pod(event.namespace, event.name, None if deleted else obj)
        if kind == "node":
            return self._apply_node(event.name, None if deleted else obj, self.nodes)
        if kind == "kubenode":
            return self._apply_node(event.name, None if deleted else obj, self.kube_nodes)
        if kind == "setting":
            return self._apply_setting(event.name, None if deleted else obj)
        return iter(())

    def _apply_im(self, namespace: str, name: str, im: InstanceManager | None) -> list[ImKey]:
        key = (namespace, name)
        record = self.records.get(key)
        if im is None:
            if record is not None:
                self._unindex(record)
                record.im, record.node = None, ""
                self._index(record)
                if record.pod is None:
                    del self.records[key]
            return [key]
        if record is None:
            record = self.records[key] = ImRecord(key)
        old = record.im
        if old is not None and _same_im_facts(old, im):
            record.im = im
            self.quiet = True
            return [key]
        if old is None or old.spec.node_id != im.spec.node_id:
            self._unindex(record)
            record.im, record.node = im, im.spec.node_id
            self._index(record)
        else:
            record.im = im
        status = im.status
        if (
            old is None
            or old.spec != im.spec
            or old.status.data_engine_status != status.data_engine_status
            or old.status.current_state != status.current_state
        ):
            record.im_shape = im_shape(im)
        return [key]

    def _apply_pod(self, namespace: str, name: str, pod: Pod | None) -> list[ImKey]:
        pod_key = (namespace, name)
        previous = self._pod_owner.get(pod_key)
        if pod is not None and not is_im_pod(pod):
            pod = None  # not an IM pod (any more): not ours to judge
        key = (namespace, owning_im(pod)) if pod is not None else previous
        if key is None:
            return []
        touched = [key]
        if previous is not None and previous != key:
            touched.append(previous)
            self._set_pod(previous, None)
        if pod is None:
            self._pod_owner.pop(pod_key, None)
        else:
            self._pod_owner[pod_key] = key
        self._set_pod(key, pod)
        return touched

    def _set_pod(self, key: ImKey, pod: Pod | None) -> None:
        record = self.records.get(key)
        if record is None:
            if pod is None:
                return
            record = self.records[key] = ImRecord(key)
        old = record.pod
        state = pod_state(pod) if pod is not None else ""
        if old is not None and pod is not None and _same_pod_facts(old, pod, record.pod_state, state):
            record.pod = pod
            self.quiet = True
            return
        record.pod_state = state
        if old is None or pod is None or old.spec.node_name != pod.spec.node_name:
            self._unindex(record)
            record.pod, record.pod_node = pod, pod.spec.node_name if pod is not None else ""
            self._index(record)
        else:
            record.pod = pod
        if pod is None:
            record.pod_shape = b""
            if record.im is None:
                del self.records[key]
        elif old is None or old.spec != pod.spec or old.metadata.annotations != pod.metadata.annotations:
            record.pod_shape = pod_shape(pod)  # (most pod events are status changes: same shape)

    def _apply_node(self, name: str, obj: Any, table: dict[str, Any]) -> Iterator[ImKey]:
        if obj is None:
            table.pop(name, None)
        else:
            table[name] = obj
        self._node_shapes.pop(name, None)
        return iter(tuple(self._by_node.get(name, ())))

    def _apply_setting(self, name: str, setting: Setting | None) -> Iterator[ImKey] | None:
        if name not in _DANGER_ZONE_NAMES:
            return iter(())
        value = None if setting is None else setting.value
        if self._setting_values.get(name) == value:
            return iter(())
        if value is None:
            del self._setting_values[name]
        else:
            self._setting_values[name] = value
        self.settings_stale = True
        return None

    def refresh_settings(self) -> bool:
        """Parse the settings if they changed; True when the parsed settings differ."""
        if not self.settings_stale:
            return False
        self.settings_stale = False
        try:
            fresh: DangerZoneSettings | SettingValueError = DangerZoneSettings.from_values(
                self._setting_values
            )
        except SettingValueError as e:
            fresh = e
        old = self.settings
        self.settings = fresh
        if isinstance(fresh, SettingValueError) or isinstance(old, SettingValueError):
            return True
        return fresh.raw != old.raw

    # --- lookups ----------------------------------------------------------------------------------

    def record_of_pod(self, namespace: str, name: str) -> ImRecord | None:
        key = self._pod_owner.get((namespace, name))
        return self.records.get(key) if key is not None else None

    def node_shape(self, record: ImRecord) -> bytes:
        """The node facts of `record`'s pod node and IM node, cached per node pair."""
        node_name, kube_name = record.pod_node, record.node
        if node_name != kube_name:  # a pod on another node than its IM's: not worth caching
            return node_shape(self.nodes.get(node_name), self.kube_nodes.get(kube_name))
        shape = self._node_shapes.get(node_name)
        if shape is None:
            shape = self._node_shapes[node_name] = node_shape(
                self.nodes.get(node_name), self.kube_nodes.get(kube_name)
            )
        return shape

    def __len__(self) -> int:
        return len(self.records)

    # --- the node index ---------------------------------------------------------------------------

    def _names(self, record: ImRecord) -> set[str]:
        return {n for n in (record.node, record.pod_node) if n}

    def _index(self, record: ImRecord) -> None:
        for name in self._names(record):
            self._by_node.setdefault(name, set()).add(record.key)

    def _unindex(self, record: ImRecord) -> None:
        for name in self._names(record):
            keys = self._by_node.get(name)
            if keys is not None:
                keys.discard(record.key)
                if not keys:
                    del self._by_node[name]
