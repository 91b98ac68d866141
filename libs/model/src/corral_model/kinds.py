"""The kinds corral watches: bus token, API coordinates and slim Struct, in one table.

The watcher lists and watches from it, the actuator addresses objects with it, and consumers pick the
decoder for `lh.obj.<kind>.…` from it, so a kind is described once.
"""

from __future__ import annotations

from typing import Any

import msgspec

from corral_model import longhorn as lh

LONGHORN_GROUP = "longhorn.io"
LONGHORN_VERSION = "v1beta2"
CORRAL_GROUP = "corral.longhorn.io"
CORRAL_VERSION = "v1alpha1"


class KindInfo(msgspec.Struct, frozen=True, kw_only=True):
    token: str  # the subject token: lh.obj.<token>.<ns>.<name>
    kind: str  # the Kubernetes kind
    group: str  # "" for the core group
    version: str
    plural: str
    namespaced: bool
    struct: Any  # the slim Struct type

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str = "", name: str = "") -> str:
        """The REST path of the collection (or of one object when `name` is given)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


def _lh(token: str, kind: str, plural: str, struct: Any) -> KindInfo:
    return KindInfo(
        token=token,
        kind=kind,
        group=LONGHORN_GROUP,
        version=LONGHORN_VERSION,
        plural=plural,
        namespaced=True,
        struct=struct,
    )


KINDS: dict[str, KindInfo] = {
    k.token: k
    for k in (
        _lh("volume", "Volume", "volumes", lh.Volume),
        _lh("engine", "Engine", "engines", lh.Engine),
        _lh("replica", "Replica", "replicas", lh.Replica),
        _lh("engineimage", "EngineImage", "engineimages", lh.EngineImage),
        _lh("node", "Node", "nodes", lh.Node),
        _lh("setting", "Setting", "settings", lh.Setting),
        _lh("instancemanager", "InstanceManager", "instancemanagers", lh.InstanceManager),
        _lh("snapshot", "Snapshot", "snapshots", lh.Snapshot),
        KindInfo(
            token="dataengineupgrademanager",
            kind="DataEngineUpgradeManager",
            group=CORRAL_GROUP,
            version=CORRAL_VERSION,
            plural="dataengineupgrademanagers",
            namespaced=True,
            struct=lh.DataEngineUpgradeManager,
        ),
        KindInfo(
            token="nodedataengineupgrade",
            kind="NodeDataEngineUpgrade",
            group=CORRAL_GROUP,
            version=CORRAL_VERSION,
            plural="nodedataengineupgrades",
            namespaced=True,
            struct=lh.NodeDataEngineUpgrade,
        ),
        KindInfo(
            token="pod", kind="Pod", group="", version="v1", plural="pods", namespaced=True, struct=lh.Pod
        ),
        KindInfo(
            token="kubenode",
            kind="Node",
            group="",
            version="v1",
            plural="nodes",
            namespaced=False,
            struct=lh.KubeNode,
        ),
        KindInfo(
            token="daemonset",
            kind="DaemonSet",
            group="apps",
            version="v1",
            plural="daemonsets",
            namespaced=True,
            struct=lh.DaemonSet,
        ),
        KindInfo(
            token="deployment",
            kind="Deployment",
            group="apps",
            version="v1",
            plural="deployments",
            namespaced=True,
            struct=lh.Deployment,
        ),
    )
}


def kind_by_name(kind: str, group: str = LONGHORN_GROUP) -> KindInfo:
    """Look a kind up by its Kubernetes kind and API group (a Command's target names the kind)."""
    for info in KINDS.values():
        if info.kind == kind and info.group == group:
            return info
    raise KeyError(f"unknown kind {kind} in group {group or 'core'}")
