"""A small cluster of instance managers for im-restart tests: objects built the way Longhorn
builds them (IM pods from the settings of their creation, through corral_dangerzone's pod
builder), fed to a decider as the watcher would, with a resourceVersion counter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from corral_dangerzone.pod_spec import expected_instance_manager_pod
from corral_dangerzone.settings import DangerZoneSettings
from corral_im_restart.core import READS, DeciderConfig, ImRestartDecider
from corral_model import longhorn as lh
from corral_model.envelopes import Command, CommandResult, EventType, ObjectEvent, Outcome
from corral_model.kinds import KINDS

NS = "longhorn-system"
_TOKENS = {info.struct: token for token, info in KINDS.items()}


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def ready_node(name: str, cpu_request: int = 0) -> lh.Node:
    return lh.Node(
        metadata=lh.ObjectMeta(name=name, namespace=NS),
        spec=lh.NodeSpec(instance_manager_cpu_request=cpu_request),
        status=lh.NodeStatus(conditions=(lh.Condition(type="Ready", status="True"),)),
    )


def kube_node(name: str, cpu: str = "4", hugepages: str | None = "2Gi") -> lh.KubeNode:
    allocatable = {"cpu": cpu}
    if hugepages is not None:
        allocatable["hugepages-2Mi"] = hugepages
    return lh.KubeNode(metadata=lh.ObjectMeta(name=name), status=lh.KubeNodeStatus(allocatable=allocatable))


def instance_manager(
    name: str,
    node: str,
    *,
    engine: str = "v1",
    state: str = "running",
    engines: Mapping[str, str] | None = None,
    replicas: Mapping[str, str] | None = None,
    conditions: tuple[lh.Condition, ...] = (),
) -> lh.InstanceManager:
    def processes(states: Mapping[str, str] | None) -> dict[str, lh.InstanceProcess]:
        return {
            n: lh.InstanceProcess(status=lh.InstanceProcessStatus(state=s)) for n, s in (states or {}).items()
        }

    return lh.InstanceManager(
        metadata=lh.ObjectMeta(name=name, namespace=NS, uid=f"uid-{name}"),
        spec=lh.InstanceManagerSpec(node_id=node, data_engine=engine),
        status=lh.InstanceManagerStatus(
            current_state=state,
            instance_engines=processes(engines),
            instance_replicas=processes(replicas),
            conditions=conditions,
        ),
    )


def im_pod(
    im: lh.InstanceManager,
    settings: DangerZoneSettings,
    node: lh.Node | None,
    kube: lh.KubeNode | None,
    *,
    uid: str = "",
    phase: str = "Running",
    ready: bool = True,
) -> lh.Pod:
    """The pod Longhorn would create for `im` under `settings`, running."""
    pod = expected_instance_manager_pod(im, settings, node, kube).to_pod(im.metadata.name, NS)
    meta = msgspec.structs.replace(
        pod.metadata,
        uid=uid or f"pod-{im.metadata.name}-1",
        labels={"longhorn.io/component": "instance-manager"},
        owner_references=(
            lh.OwnerReference(kind="InstanceManager", name=im.metadata.name, uid=im.metadata.uid),
        ),
    )
    status = lh.PodStatus(
        phase=phase, container_statuses=(lh.ContainerStatus(name="instance-manager", ready=ready),)
    )
    return msgspec.structs.replace(pod, metadata=meta, status=status)


def setting(name: str, value: str) -> lh.Setting:
    return lh.Setting(metadata=lh.ObjectMeta(name=name, namespace=NS), value=value)


class Cluster:
    """Objects by (token, name), published with increasing resourceVersions."""

    def __init__(self, config: DeciderConfig | None = None) -> None:
        self.clock = Clock()
        self.decider = ImRestartDecider(self.clock, config)
        self.rv = 100
        self.objects: dict[tuple[str, str], Any] = {}

    def put(self, *objs: Any) -> None:
        for obj in objs:
            self.rv += 1
            token = _TOKENS[type(obj)]
            meta = msgspec.structs.replace(obj.metadata, resource_version=str(self.rv))
            obj = msgspec.structs.replace(obj, metadata=meta)
            self.objects[(token, meta.name)] = obj
            self.decider.apply(self.event(EventType.MODIFIED, token, obj))

    def delete(self, token: str, name: str) -> None:
        obj = self.objects.pop((token, name))
        self.rv += 1
        self.decider.apply(self.event(EventType.DELETED, token, obj))

    def event(self, type_: EventType, token: str, obj: Any) -> ObjectEvent[Any]:
        meta = obj.metadata
        return ObjectEvent(
            type=type_,
            kind=token,
            namespace=meta.namespace if KINDS[token].namespaced else "",
            name=meta.name,
            uid=meta.uid,
            resource_version=meta.resource_version or str(self.rv),
            object=obj,
        )

    def resync(self, kinds: Iterable[str] = READS) -> None:
        for token in sorted(kinds):
            self.decider.apply(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=NS, name=""))

    def replica(self) -> ImRestartDecider:
        """Another replica's decider with the same view (bootstrapped), none of the commands."""
        other = ImRestartDecider(self.clock, self.decider.config)
        for (token, _), obj in self.objects.items():
            other.apply(self.event(EventType.MODIFIED, token, obj))
        for token in sorted(READS):
            other.apply(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=NS, name=""))
        return other

    def get(self, token: str, name: str) -> Any:
        return self.objects[(token, name)]

    def decide(self) -> list[Command]:
        return list(self.decider.decide())

    def result(self, command: Command, outcome: Outcome = Outcome.APPLIED) -> None:
        self.decider.record_result(
            CommandResult(
                command_id=command.id, service=command.service, target=command.target, outcome=outcome
            )
        )


def deletes(commands: Iterable[Command]) -> list[str]:
    return sorted(c.target.name for c in commands if c.verb == "delete")


def condition_patches(commands: Iterable[Command]) -> list[str]:
    return sorted(c.target.name for c in commands if c.verb == "patch-status")


def one_node_cluster(
    *,
    settings: DangerZoneSettings | None = None,
    config: DeciderConfig | None = None,
    engine: str = "v1",
    **im: Any,
) -> Cluster:
    """node-1 with one running IM `im-1` and its pod built under `settings` (defaults)."""
    cluster = Cluster(config)
    settings = settings or DangerZoneSettings.defaults()
    node, kube = ready_node("node-1"), kube_node("node-1")
    manager = instance_manager("im-1", "node-1", engine=engine, **im)
    cluster.put(node, kube, manager, im_pod(manager, settings, node, kube))
    cluster.resync()
    return cluster
