"""Builders for engine-upgrade tests: slim Longhorn objects and a feed that wraps them in events
with increasing resourceVersions, as the watcher would publish them."""

from __future__ import annotations

from typing import Any

import msgspec

from corral_engine_upgrade.core import DeciderConfig, EngineUpgradeDecider
from corral_engine_upgrade.view import DEFAULT_IMAGE_SETTING, LIMIT_SETTING, REQUIRED_KINDS
from corral_model import longhorn as lh
from corral_model.envelopes import (
    Command,
    CommandResult,
    EventType,
    ObjectEvent,
    Outcome,
)

NS = "longhorn-system"
OLD = "longhornio/longhorn-engine:v1.9.3"
NEW = "longhornio/longhorn-engine:v1.10.0"
NEWER = "longhornio/longhorn-engine:v1.11.0"
NODES = ("n1", "n2", "n3")


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def volume(
    name: str,
    *,
    owner: str = "n1",
    state: str = "attached",
    robustness: str = "healthy",
    node: str | None = None,
    image: str = OLD,
    current: str | None = None,
    data_engine: str = "v1",
    standby: bool = False,
    expansion_required: bool = False,
    migration_node: str = "",
    current_migration_node: str = "",
    locality: str = "disabled",
) -> lh.Volume:
    return lh.Volume(
        metadata=lh.ObjectMeta(name=name, namespace=NS, uid=f"uid-{name}"),
        spec=lh.VolumeSpec(
            image=image, data_engine=data_engine, migration_node_id=migration_node, data_locality=locality
        ),
        status=lh.VolumeStatus(
            state=state,
            robustness=robustness if state == "attached" else "unknown",
            current_image=image if current is None else current,
            owner_id=owner,
            current_node_id=(owner if state == "attached" else "") if node is None else node,
            is_standby=standby,
            expansion_required=expansion_required,
            current_migration_node_id=current_migration_node,
        ),
    )


def replica(volume_name: str, index: int, node: str) -> lh.Replica:
    return lh.Replica(
        metadata=lh.ObjectMeta(name=f"{volume_name}-r-{index:08x}", namespace=NS),
        spec=lh.ReplicaSpec(volume_name=volume_name, node_id=node),
    )


def engine_image(
    image: str,
    *,
    state: str = "deployed",
    nodes: dict[str, bool] | None = None,
    api: int = 6,
    api_min: int = 4,
    incompatible: bool = False,
    deleting: bool = False,
) -> lh.EngineImage:
    return lh.EngineImage(
        metadata=lh.ObjectMeta(
            name=lh.engine_image_name(image),
            namespace=NS,
            deletion_timestamp="2026-11-21T00:00:00Z" if deleting else None,
        ),
        spec=lh.EngineImageSpec(image=image),
        status=lh.EngineImageStatus(
            state=state,
            node_deployment_map={n: True for n in NODES} if nodes is None else nodes,
            controller_api_version=api,
            controller_api_min_version=api_min,
            incompatible=incompatible,
        ),
    )


def setting(name: str, value: str) -> lh.Setting:
    return lh.Setting(metadata=lh.ObjectMeta(name=name, namespace=NS), value=value)


def longhorn_node(name: str) -> lh.Node:
    return lh.Node(metadata=lh.ObjectMeta(name=name, namespace=NS))


_TOKENS: dict[type[Any], str] = {
    lh.Volume: "volume",
    lh.Replica: "replica",
    lh.EngineImage: "engineimage",
    lh.Setting: "setting",
    lh.Node: "node",
}


class Feed:
    """Wraps objects in ObjectEvents with a cluster-wide increasing resourceVersion."""

    def __init__(self, decider: EngineUpgradeDecider) -> None:
        self.decider = decider
        self.rv = 0

    def event(
        self, obj: Any, type_: EventType = EventType.MODIFIED, rv: int | None = None
    ) -> ObjectEvent[Any]:
        if rv is None:
            self.rv += 1
            rv = self.rv
        return ObjectEvent(
            type=type_,
            kind=_TOKENS[type(obj)],
            namespace=obj.metadata.namespace,
            name=obj.metadata.name,
            resource_version=str(rv),
            object=msgspec.structs.replace(
                obj, metadata=msgspec.structs.replace(obj.metadata, resource_version=str(rv))
            ),
        )

    def put(self, *objs: Any) -> None:
        for obj in objs:
            self.decider.apply(self.event(obj))

    def delete(self, obj: Any) -> None:
        self.decider.apply(self.event(obj, EventType.DELETED))

    def resync(self) -> None:
        for kind in sorted(REQUIRED_KINDS):
            self.decider.apply(ObjectEvent(type=EventType.RESYNCED, kind=kind, namespace=NS, name=""))

    def volume_with_replicas(self, vol: lh.Volume, nodes: tuple[str, ...] = NODES) -> None:
        self.put(vol, *(replica(vol.metadata.name, i, n) for i, n in enumerate(nodes)))


def upgraded(vol: lh.Volume, image: str = NEW, *, done: bool = False) -> lh.Volume:
    """The volume after the actuator set spec.image (and, with done, after the upgrade finished)."""
    spec = msgspec.structs.replace(vol.spec, image=image)
    status = msgspec.structs.replace(vol.status, current_image=image) if done else vol.status
    return msgspec.structs.replace(vol, spec=spec, status=status)


def result(command: Command, outcome: Outcome, dry_run: bool = False) -> CommandResult:
    return CommandResult(
        command_id=command.id,
        service=command.service,
        target=command.target,
        outcome=outcome,
        dry_run=dry_run,
    )


def ready_cluster(
    clock: Clock, *, limit: str = "2", config: DeciderConfig | None = None
) -> tuple[EngineUpgradeDecider, Feed]:
    """A complete view: three nodes, OLD and NEW images deployed everywhere, NEW the default."""
    decider = EngineUpgradeDecider(clock, config)
    feed = Feed(decider)
    feed.put(*(longhorn_node(n) for n in NODES))
    feed.put(engine_image(OLD, api=5), engine_image(NEW))
    feed.put(setting(DEFAULT_IMAGE_SETTING, NEW), setting(LIMIT_SETTING, limit))
    feed.resync()
    return decider, feed


def names(commands: list[Command]) -> list[str]:
    return [c.target.name for c in commands]
