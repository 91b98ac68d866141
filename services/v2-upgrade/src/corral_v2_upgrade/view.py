"""What v2-upgrade sees of the cluster: the objects of every kind it reads, by name, and the few
indexes its steps look things up by (replicas and instance managers per node, volumes per owner
node, engines per volume, snapshots per node upgrade, node upgrades per manager).

A node upgrade's step costs O(what sits on that node), never O(cluster): everything is found
through an index kept up to date per event. Longhorn keeps these objects in one namespace, so a
name is a key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from corral_model import longhorn as lh

FOR_UPGRADE_LABEL = "longhorn.io/for-data-engine-live-upgrade"
DISABLE_V2_LABEL = "node.longhorn.io/disable-v2-data-engine"
DEFAULT_IM_IMAGE = "default-instance-manager-image"
ABORT_ANNOTATION = "corral.longhorn.io/abort"
"""On a DataEngineUpgradeManager: stop the upgrade (its value, if any, is the operator's note)."""
V2 = "v2"

T = TypeVar("T")


def abort_requested(manager: lh.DataEngineUpgradeManager | None) -> bool:
    return manager is not None and ABORT_ANNOTATION in manager.metadata.annotations


class Index(Generic[T]):
    """Objects of one kind grouped by a key derived from each (its node, its volume…)."""

    def __init__(self, key_of: Callable[[T], str]) -> None:
        self._key_of = key_of
        self._groups: dict[str, set[str]] = defaultdict(set)
        self._keys: dict[str, str] = {}

    def put(self, name: str, obj: T | None) -> None:
        old = self._keys.pop(name, None)
        if old is not None:
            group = self._groups[old]
            group.discard(name)
            if not group:
                del self._groups[old]
        if obj is not None:
            key = self._key_of(obj)
            self._keys[name] = key
            self._groups[key].add(name)

    def names(self, key: str) -> list[str]:
        return sorted(self._groups.get(key, ()))


class UpgradeView:
    def __init__(self) -> None:
        self.managers: dict[str, lh.DataEngineUpgradeManager] = {}
        self.node_upgrades: dict[str, lh.NodeDataEngineUpgrade] = {}
        self.nodes: dict[str, lh.Node] = {}
        self.kube_nodes: dict[str, lh.KubeNode] = {}
        self.volumes: dict[str, lh.Volume] = {}
        self.engines: dict[str, lh.Engine] = {}
        self.replicas: dict[str, lh.Replica] = {}
        self.instance_managers: dict[str, lh.InstanceManager] = {}
        self.settings: dict[str, lh.Setting] = {}
        self.snapshots: dict[str, lh.Snapshot] = {}
        self.replicas_by_node: Index[lh.Replica] = Index(lambda r: r.spec.node_id)
        self.replicas_by_volume: Index[lh.Replica] = Index(lambda r: r.spec.volume_name)
        self.ims_by_node: Index[lh.InstanceManager] = Index(lambda im: im.spec.node_id)
        self.volumes_by_owner: Index[lh.Volume] = Index(lambda v: v.status.owner_id)
        self.engines_by_volume: Index[lh.Engine] = Index(lambda e: e.spec.volume_name)
        self.snapshots_by_upgrade: Index[lh.Snapshot] = Index(
            lambda s: s.metadata.labels.get(FOR_UPGRADE_LABEL, "")
        )
        self.upgrades_by_manager: Index[lh.NodeDataEngineUpgrade] = Index(
            lambda u: u.spec.data_engine_upgrade_manager
        )
        self._tables: dict[str, tuple[dict[str, Any], tuple[Index[Any], ...]]] = {
            "dataengineupgrademanager": (self.managers, ()),
            "nodedataengineupgrade": (self.node_upgrades, (self.upgrades_by_manager,)),
            "node": (self.nodes, ()),
            "kubenode": (self.kube_nodes, ()),
            "volume": (self.volumes, (self.volumes_by_owner,)),
            "engine": (self.engines, (self.engines_by_volume,)),
            "replica": (self.replicas, (self.replicas_by_node, self.replicas_by_volume)),
            "instancemanager": (self.instance_managers, (self.ims_by_node,)),
            "setting": (self.settings, ()),
            "snapshot": (self.snapshots, (self.snapshots_by_upgrade,)),
        }

    def put(self, kind: str, name: str, obj: Any | None) -> None:
        """Store (or, with None, forget) one object of `kind` (a bus token)."""
        table, indexes = self._tables[kind]
        if obj is None:
            table.pop(name, None)
        else:
            table[name] = obj
        for index in indexes:
            index.put(name, obj)

    def get(self, kind: str, name: str) -> Any | None:
        return self._tables[kind][0].get(name)

    # --- lookups the steps share ---------------------------------------------------------------------

    def setting(self, name: str) -> str | None:
        found = self.settings.get(name)
        return found.value if found is not None else None

    def v2_replicas_on(self, node: str) -> Iterator[lh.Replica]:
        """Only v2 replicas: the prototype failed and deleted v1 ones too (§5.6)."""
        for name in self.replicas_by_node.names(node):
            replica = self.replicas[name]
            if replica.spec.data_engine == V2:
                yield replica

    def v2_instance_managers_on(self, node: str) -> Iterator[lh.InstanceManager]:
        for name in self.ims_by_node.names(node):
            im = self.instance_managers[name]
            if im.spec.data_engine == V2 and im.spec.type in ("aio", ""):
                yield im

    def v2_volumes_owned_by(self, node: str) -> list[lh.Volume]:
        return [
            self.volumes[n]
            for n in self.volumes_by_owner.names(node)
            if self.volumes[n].spec.data_engine == V2
        ]

    def current_engine(self, volume: lh.Volume) -> lh.Engine | None:
        engines = [self.engines[n] for n in self.engines_by_volume.names(volume.metadata.name)]
        if not engines:
            return None
        on_node = [e for e in engines if e.spec.node_id == volume.status.current_node_id]
        return (on_node or engines)[0]

    def node_upgrades_of(self, manager: str) -> list[lh.NodeDataEngineUpgrade]:
        return [self.node_upgrades[n] for n in self.upgrades_by_manager.names(manager)]

    def v2_disabled(self, node: str) -> bool:
        kube = self.kube_nodes.get(node)
        return kube is not None and kube.metadata.labels.get(DISABLE_V2_LABEL) == "true"

    def node_ready(self, node: str) -> bool:
        found = self.nodes.get(node)
        return found is not None and lh.condition_status(found.status.conditions, "Ready") == "True"
