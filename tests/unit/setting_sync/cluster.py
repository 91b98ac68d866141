"""A small cluster for setting-sync's unit and property tests: builders for Settings, volumes and
the managed components, and `Cluster`, which feeds the decider events with growing
resourceVersions and plays the actuator and Longhorn's controllers on its commands (a template
patch is written, a deleted pod comes back with the current settings, a status is stored)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from corral_dangerzone.network import CNI_NETWORKS_ANNOTATION, STORAGE_NETWORK_INTERFACE, cni_annotation
from corral_dangerzone.node_selector import parse_node_selector
from corral_dangerzone.tolerations import (
    LAST_APPLIED_TOLERATIONS_ANNOTATION,
    last_applied_annotation,
    parse_tolerations,
)
from corral_model import longhorn as lh
from corral_model.envelopes import Command, EventType, ObjectEvent, Verb
from corral_setting_sync.core import READS, SettingSyncDecider

NS = "longhorn-system"
_TOKEN = {struct: token for token, struct in READS.items()}


def setting(name: str, value: str, applied: bool = False) -> lh.Setting:
    return lh.Setting(
        metadata=lh.ObjectMeta(name=name, namespace=NS),
        value=value,
        status=lh.SettingStatus(applied=applied),
    )


def volume(
    name: str, state: str = "detached", access_mode: str = "rwo", migratable: bool = False
) -> lh.Volume:
    return lh.Volume(
        metadata=lh.ObjectMeta(name=name, namespace=NS),
        spec=lh.VolumeSpec(access_mode=access_mode, migratable=migratable),
        status=lh.VolumeStatus(state=state),
    )


def carried(values: Mapping[str, str]) -> tuple[lh.PodSpec, dict[str, str]]:
    """The spec fields and annotations a component created under `values` carries."""
    tolerations = parse_tolerations(values.get("taint-toleration", ""))
    selector = parse_node_selector(values.get("system-managed-components-node-selector", ""))
    annotations = {LAST_APPLIED_TOLERATIONS_ANNOTATION: last_applied_annotation(tolerations)}
    network = cni_annotation(values.get("storage-network", ""), STORAGE_NETWORK_INTERFACE)
    if network:
        annotations[CNI_NETWORKS_ANNOTATION] = network
    spec = lh.PodSpec(
        tolerations=tolerations,
        node_selector=selector or None,
        priority_class_name=values.get("priority-class", ""),
    )
    return spec, annotations


_uids = itertools.count(1)


def component_pod(
    name: str,
    component: str = "instance-manager",
    values: Mapping[str, str] | None = None,
    node: str = "node-1",
) -> lh.Pod:
    spec, annotations = carried(values or {})
    return lh.Pod(
        metadata=lh.ObjectMeta(
            name=name,
            namespace=NS,
            uid=f"{name}-uid-{next(_uids)}",
            labels={"longhorn.io/component": component},
            annotations=annotations,
        ),
        spec=msgspec.structs.replace(spec, node_name=node),
        status=lh.PodStatus(phase="Running"),
    )


def workload(
    kind: type[lh.DaemonSet] | type[lh.Deployment], name: str, values: Mapping[str, str] | None = None
) -> Any:
    spec, annotations = carried(values or {})
    annotations.pop(CNI_NETWORKS_ANNOTATION, None)  # storage-network is not a template's
    containers = (lh.Container(name=name if kind is lh.Deployment else "longhorn-csi-plugin"),)
    template = lh.PodTemplate(
        metadata=lh.PodTemplateMeta(annotations=annotations),
        spec=msgspec.structs.replace(spec, containers=containers),
    )
    return kind(metadata=lh.ObjectMeta(name=name, namespace=NS), spec=lh.WorkloadSpec(template=template))


def _namespace(token: str) -> str:
    """Kubernetes nodes are cluster-scoped: the watcher publishes them without a namespace."""
    return "" if token == "kubenode" else NS


def _set(document: Any, path: str, value: Any) -> None:
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
    for part in parts[:-1]:
        document = document[int(part)] if isinstance(document, list) else document.setdefault(part, {})
    last = parts[-1]
    if isinstance(document, list):
        document[int(last)] = value
    elif value is None:
        document.pop(last, None)
    else:
        document[last] = value


class Cluster:
    """The decider under test, fed like the bus feeds it, plus an actuator that always applies."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.decider = SettingSyncDecider(lambda: self.now)
        self.rv = itertools.count(100)
        self.objects: dict[tuple[str, str], Any] = {}
        self.values: dict[str, str] = {}
        self.events: list[Command] = []

    def put(self, *objs: Any) -> None:
        for obj in objs:
            token = _TOKEN[type(obj)]
            rv = str(next(self.rv))
            obj = msgspec.structs.replace(
                obj, metadata=msgspec.structs.replace(obj.metadata, resource_version=rv)
            )
            self.objects[(token, obj.metadata.name)] = obj
            if token == "setting":
                self.values[obj.metadata.name] = obj.value
            self.decider.apply(
                ObjectEvent(
                    type=EventType.MODIFIED,
                    kind=token,
                    namespace=_namespace(token),
                    name=obj.metadata.name,
                    uid=obj.metadata.uid,
                    resource_version=rv,
                    object=obj,
                )
            )

    def delete(self, token: str, name: str) -> None:
        obj = self.objects.pop((token, name))
        self.decider.apply(
            ObjectEvent(
                type=EventType.DELETED,
                kind=token,
                namespace=_namespace(token),
                name=name,
                uid=obj.metadata.uid,
                resource_version=str(next(self.rv)),
                object=obj,
            )
        )

    def resync(self) -> None:
        for token in READS:
            self.decider.apply(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=NS, name=""))

    def get(self, token: str, name: str) -> Any:
        return self.objects[(token, name)]

    def decide(self) -> list[Command]:
        """The commands decided, but the pending Events, which go to `events` (the rules' tests
        look at writes; test_events.py at the Events)."""
        commands = list(self.decider.decide())
        self.events += [c for c in commands if c.target.kind == "Event"]
        return [c for c in commands if c.target.kind != "Event"]

    def carry_out(self, commands: Iterable[Command]) -> None:
        """What the actuator and Longhorn's controllers make of `commands`: every one applies."""
        for command in commands:
            token = {
                "Pod": "pod",
                "DaemonSet": "daemonset",
                "Deployment": "deployment",
                "Setting": "setting",
                "InstanceManager": "instancemanager",
            }[command.target.kind]
            obj = self.objects.get((token, command.target.name))
            if obj is None:
                continue
            if command.verb is Verb.DELETE and token == "instancemanager":
                self.delete(token, command.target.name)
                continue
            if command.verb is Verb.DELETE:
                self.delete(token, command.target.name)
                component = obj.metadata.labels["longhorn.io/component"]
                self.put(component_pod(obj.metadata.name, component, self.values, obj.spec.node_name))
                continue
            document = msgspec.json.decode(msgspec.json.encode(obj))
            for change in command.changes:
                _set(document, change.path, change.value)
            self.put(msgspec.convert(document, type(obj)))

    def settle(self, rounds: int = 5) -> list[Command]:
        """Decide and carry out until nothing more is sent; every command sent."""
        sent: list[Command] = []
        for _ in range(rounds):
            commands = self.decide()
            if not commands:
                break
            sent += commands
            self.carry_out(commands)
        return sent


def by_kind(commands: Sequence[Command]) -> list[tuple[str, str, str]]:
    return sorted((str(c.verb), c.target.kind, c.target.name) for c in commands)


def applied_writes(commands: Sequence[Command]) -> dict[str, bool]:
    return {c.target.name: c.changes[0].value for c in commands if c.verb is Verb.PATCH_STATUS}
