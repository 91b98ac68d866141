"""A small in-process cluster for v2-upgrade's decider: objects as the watcher would publish them,
commands applied as the actuator would (preconditions checked, JSON Patch applied, creates and
deletes), and a toy data plane standing in for the Longhorn controllers the decider does not
replace (replicas stop, targets switch, an upgraded node's IM comes back on the new image,
replicas are rebuilt where the scheduler allows, robustness follows the replica count).

No bus and no clock of its own: tests step it, and may swap the decider for a fresh one built from
the same objects at any point (a restart).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from corral_kube.patching import first_not_holding
from corral_kube.patching import json_patch as build_patch
from corral_model import longhorn as lh
from corral_model.envelopes import Command, EventType, ObjectEvent, Verb
from corral_model.kinds import KINDS
from corral_sandbox.emulator.patching import json_patch as apply_patch
from corral_v2_upgrade.commands import rfc3339
from corral_v2_upgrade.config import DeciderConfig
from corral_v2_upgrade.core import READS, V2UpgradeDecider
from corral_v2_upgrade.view import DEFAULT_IM_IMAGE

NS = "longhorn-system"
OLD = "longhornio/longhorn-instance-manager:v1.9.0"
NEW = "longhornio/longhorn-instance-manager:v1.10.0"
V1_IM = "longhornio/longhorn-instance-manager:v1.9.0-v1"
_TOKENS = {info.struct: token for token, info in KINDS.items()}
_BY_KIND = {info.kind: token for token, info in KINDS.items() if info.group != ""}
_BY_KIND["Node"] = "node"


def token_of(kind: str) -> str:
    return _BY_KIND[kind]


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def meta(name: str, **labels: str) -> lh.ObjectMeta:
    return lh.ObjectMeta(name=name, namespace=NS, uid=f"uid-{name}", labels=labels)


def lh_node(name: str) -> lh.Node:
    return lh.Node(
        metadata=meta(name), status=lh.NodeStatus(conditions=(lh.Condition(type="Ready", status="True"),))
    )


def kube_node(name: str, images: Iterable[str] = (OLD, NEW), **labels: str) -> lh.KubeNode:
    return lh.KubeNode(
        metadata=lh.ObjectMeta(name=name, uid=f"uid-k-{name}", labels=labels),
        status=lh.KubeNodeStatus(images=tuple({"names": [i]} for i in images)),
    )


def instance_manager(node: str, image: str = OLD, engine: str = "v2", uid: str = "") -> lh.InstanceManager:
    name = f"im-{engine}-{node}-{lh.engine_image_name(image)[3:]}"
    m = msgspec.structs.replace(meta(name), uid=uid or f"uid-{name}")
    return lh.InstanceManager(
        metadata=m,
        spec=lh.InstanceManagerSpec(node_id=node, image=image, data_engine=engine),
        status=lh.InstanceManagerStatus(current_state="running"),
    )


def setting(name: str, value: str) -> lh.Setting:
    return lh.Setting(metadata=meta(name), value=value)


def manager(
    name: str = "upgrade", nodes: tuple[str, ...] = (), start_time: str = ""
) -> lh.DataEngineUpgradeManager:
    return lh.DataEngineUpgradeManager(
        metadata=meta(name), spec=lh.DataEngineUpgradeManagerSpec(nodes=nodes, start_time=start_time)
    )


def _with(meta: lh.ObjectMeta, **changes: Any) -> lh.ObjectMeta:
    return msgspec.structs.replace(meta, **changes)


class World:
    """Objects by (token, name); every write bumps one global resourceVersion, as an API server does."""

    def __init__(self, config: DeciderConfig | None = None, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self.config = config or DeciderConfig(node_timeout=0)
        self.objects: dict[tuple[str, str], Any] = {}
        self.rv = 0
        self.applied: list[Command] = []
        self.refused: list[Command] = []
        self.decider = V2UpgradeDecider(self.clock, self.config)
        self._listed = False
        self.events: list[Command] = []
        """Event commands, as the actuator would record them (only with `DeciderConfig.events`)."""
        self.stalled: set[str] = set()
        """Volumes the data plane leaves alone: no switch-over finishes, no rebuild, no robustness
        change (a stuck relocation, a volume degraded elsewhere)."""
        self.rebuild_passes = 0
        """Passes a volume that may rebuild waits before its missing replica appears (a rebuild
        takes time: a decider acting on the very pass a node is released finds it still degraded)."""
        self._rebuild_waited: dict[str, int] = {}

    # --- objects ----------------------------------------------------------------------------------

    def put(self, *objs: Any) -> None:
        for obj in objs:
            self.rv += 1
            token = _TOKENS[type(obj)]
            stamped = msgspec.structs.replace(
                obj,
                metadata=msgspec.structs.replace(
                    obj.metadata,
                    resource_version=str(self.rv),
                    creation_timestamp=obj.metadata.creation_timestamp or rfc3339(self.clock()),
                ),
            )
            before = self.objects.get((token, obj.metadata.name))
            self.objects[(token, obj.metadata.name)] = stamped
            if self._listed:
                self._feed(EventType.ADDED if before is None else EventType.MODIFIED, token, stamped)
            held = before is not None and bool(before.metadata.finalizers)
            meta = stamped.metadata
            if held and meta.deletion_timestamp and not meta.finalizers:
                self.delete(token, obj.metadata.name)  # its last finalizer came off

    def delete(self, token: str, name: str) -> None:
        """As the API server deletes: an object with finalizers is only marked (deletionTimestamp)
        until the last one comes off (`put`), then it goes."""
        obj = self.objects.get((token, name))
        if obj is not None and obj.metadata.finalizers:
            if not obj.metadata.deletion_timestamp:
                stamp = rfc3339(self.clock())
                self.put(msgspec.structs.replace(obj, metadata=_with(obj.metadata, deletion_timestamp=stamp)))
            return
        obj = self.objects.pop((token, name), None)
        if obj is not None and self._listed:
            self.rv += 1
            self._feed(EventType.DELETED, token, obj)

    def get(self, token: str, name: str) -> Any:
        return self.objects.get((token, name))

    def all(self, token: str) -> list[Any]:
        return [o for (t, _), o in sorted(self.objects.items()) if t == token]

    def _feed(self, type_: EventType, token: str, obj: Any, decider: V2UpgradeDecider | None = None) -> None:
        (decider or self.decider).apply(
            ObjectEvent(
                type=type_,
                kind=token,
                namespace=obj.metadata.namespace,
                name=obj.metadata.name,
                uid=obj.metadata.uid,
                resource_version=obj.metadata.resource_version,
                object=obj,
            )
        )

    def fresh_decider(self) -> V2UpgradeDecider:
        """A decider that knows nothing but the objects (a restart, or a new leader)."""
        decider = V2UpgradeDecider(self.clock, self.config)
        for (token, _), obj in sorted(self.objects.items()):
            if token in READS:
                self._feed(EventType.ADDED, token, obj, decider)
        for token in sorted(READS):
            decider.apply(ObjectEvent(type=EventType.RESYNCED, kind=token, namespace=NS, name=""))
        return decider

    def start(self) -> None:
        self._listed = True
        self.decider = self.fresh_decider()

    def restart(self) -> None:
        self.decider = self.fresh_decider()

    # --- the actuator -------------------------------------------------------------------------------

    def reflected(self, command: Command) -> bool:
        """The command's effect is already in the objects (a create of an existing object, a delete
        of a gone or terminating one, a patch that would change nothing). Never an Event: each
        one reports an occurrence."""
        if command.target.kind == "Event":
            return False
        obj = self.get(token_of(command.target.kind), command.target.name)
        if command.verb is Verb.CREATE:
            return obj is not None
        if command.verb is Verb.DELETE:
            return obj is None or bool(obj.metadata.deletion_timestamp)
        return obj is not None and first_not_holding(msgspec.to_builtins(obj), command.changes) is None

    def apply(self, command: Command) -> bool:
        if command.target.kind == "Event":
            self.events.append(command)
            return True
        token = token_of(command.target.kind)
        struct = KINDS[token].struct
        obj = self.get(token, command.target.name)
        if command.verb is Verb.CREATE:
            if obj is None:
                assert command.body is not None
                self.put(msgspec.convert(command.body, struct))
            self.applied.append(command)
            return True
        doc = msgspec.to_builtins(obj) if obj is not None else None
        if (
            doc is None
            or first_not_holding(doc, command.preconditions) is not None
            or (command.target.uid and command.target.uid != obj.metadata.uid)
        ):
            self.refused.append(command)
            return False
        self.applied.append(command)
        if command.verb is Verb.DELETE:
            self.delete(token, command.target.name)
            return True
        self.put(msgspec.convert(apply_patch(doc, build_patch(command.changes, snapshot=doc)), struct))
        return True

    def step(self, restart: bool = False, tick: float = 0.0) -> list[Command]:
        """One decision pass, its commands applied, then the data plane's reaction."""
        self.clock.now += tick
        if restart:
            self.restart()
        commands = self.decider.decide()
        for command in commands:
            self.apply(command)
        self.data_plane()
        return commands

    def run(self, limit: int = 300, tick: float = 1.0, manager: str = "upgrade") -> str:
        """Step until `manager` is terminal; its final state."""
        for _ in range(limit):
            self.step(tick=tick)
            state = self.get("dataengineupgrademanager", manager).status.state
            if state in ("completed", "error"):
                return str(state)
        raise AssertionError(f"{manager} not finished after {limit} passes")

    def node_upgrades(self, node: str) -> list[lh.NodeDataEngineUpgrade]:
        return [u for u in self.all("nodedataengineupgrade") if u.spec.node_id == node]

    def step_until(self, node: str, state: str, limit: int = 60) -> lh.NodeDataEngineUpgrade:
        """Step until `node`'s latest node upgrade is in `state`; that node upgrade."""
        for _ in range(limit):
            found = self.node_upgrades(node)
            if found and found[-1].status.state == state:
                return found[-1]
            self.step(tick=1.0)
        raise AssertionError(f"{node} never reached {state}: {[u.status for u in self.node_upgrades(node)]}")

    # --- the toy data plane ---------------------------------------------------------------------------

    def data_plane(self) -> None:
        upgrading = {
            u.spec.node_id: u.status.state
            for u in self.all("nodedataengineupgrade")
            if u.status.state not in ("completed", "error", "rebuilding-replica", "finalizing")
        }
        default = self.get("setting", DEFAULT_IM_IMAGE)
        for rep in self.all("replica"):
            if rep.spec.desire_state == "stopped" and rep.status.current_state != "stopped":
                self.put(msgspec.structs.replace(rep, status=lh.ReplicaStatus(current_state="stopped")))
        for volume in self.all("volume"):
            spec, status = volume.spec, volume.status
            if volume.metadata.name in self.stalled:
                continue
            if (spec.target_node_id_for_live_upgrade, spec.image) != (
                status.current_target_node_id_for_live_upgrade,
                status.current_image,
            ):
                self.put(
                    msgspec.structs.replace(
                        volume,
                        status=msgspec.structs.replace(
                            status,
                            current_target_node_id_for_live_upgrade=spec.target_node_id_for_live_upgrade,
                            current_image=spec.image,
                        ),
                    )
                )
        # An upgraded node whose old v2 IM is gone gets one on the default image, serving its engines.
        for node in self.all("node"):
            name = node.metadata.name
            ims = [
                i
                for i in self.all("instancemanager")
                if i.spec.node_id == name and i.spec.data_engine == "v2"
            ]
            if default is not None and not ims and name in upgrading:
                im = instance_manager(name, default.value)
                engines = {
                    e.metadata.name: lh.InstanceProcess(status=lh.InstanceProcessStatus(state="running"))
                    for e in self.all("engine")
                    if e.spec.node_id == name
                }
                self.put(
                    msgspec.structs.replace(
                        im, status=msgspec.structs.replace(im.status, instance_engines=engines)
                    )
                )
        # Rebuild missing v2 replicas on a node not being upgraded, unless the volume's owner is
        # (Longhorn's volume controller skips replenishment there, §5.4) or one of its replicas is;
        # robustness follows the count.
        for volume in self.all("volume"):
            if volume.spec.data_engine != "v2" or volume.metadata.name in self.stalled:
                continue
            name = volume.metadata.name
            mine = [r for r in self.all("replica") if r.spec.volume_name == name]
            have = {r.spec.node_id for r in mine}
            # nor while any of its replicas sits on an upgrading node (the v2 engine's rule)
            may_rebuild = volume.status.owner_id not in upgrading and not (have & upgrading.keys())
            if may_rebuild and len(have) < volume.spec.number_of_replicas:
                waited = self._rebuild_waited[name] = self._rebuild_waited.get(name, 0) + 1
                may_rebuild = waited > self.rebuild_passes
            else:
                self._rebuild_waited.pop(name, None)
            for node in sorted(n.metadata.name for n in self.all("node")):
                if len(have) >= volume.spec.number_of_replicas or not may_rebuild:
                    break
                if node not in have and node not in upgrading:
                    self.put(replica(name, node, f"{len(mine)}-{self.rv}"))
                    have.add(node)
            robustness = "healthy" if len(have) >= volume.spec.number_of_replicas else "degraded"
            if volume.status.state == "attached" and volume.status.robustness != robustness:
                self.put(
                    msgspec.structs.replace(
                        volume,
                        status=msgspec.structs.replace(
                            self.get("volume", name).status, robustness=robustness
                        ),
                    )
                )


def replica(volume: str, node: str, suffix: str = "", engine: str = "v2") -> lh.Replica:
    return lh.Replica(
        metadata=meta(f"{volume}-r-{node}{'-' + suffix if suffix else ''}"),
        spec=lh.ReplicaSpec(volume_name=volume, node_id=node, data_engine=engine, desire_state="running"),
        status=lh.ReplicaStatus(current_state="running"),
    )


def volume(
    name: str, owner: str, replicas: int = 3, engine: str = "v2", image: str = OLD, attached: bool = True
) -> list[Any]:
    """A volume attached to (and owned by) `owner`, its engine there, with `replicas` replicas."""
    vol = lh.Volume(
        metadata=meta(name),
        spec=lh.VolumeSpec(
            image=image, data_engine=engine, number_of_replicas=replicas, node_id=owner if attached else ""
        ),
        status=lh.VolumeStatus(
            state="attached" if attached else "detached",
            robustness="healthy" if attached else "unknown",
            current_image=image,
            owner_id=owner,
            current_node_id=owner if attached else "",
        ),
    )
    eng = lh.Engine(
        metadata=meta(f"{name}-e-0"),
        spec=lh.EngineSpec(
            volume_name=name, node_id=owner if attached else "", data_engine=engine, image=image
        ),
        status=lh.EngineStatus(current_state="running" if attached else "stopped", current_image=image),
    )
    return [vol, eng]


def cluster(
    nodes: int = 3,
    volumes: dict[str, str] | None = None,
    replicas: int = 3,
    config: DeciderConfig | None = None,
) -> World:
    """`nodes` ready nodes with an old v2 IM (and a v1 IM) each, the new default IM image set,
    and the given v2 volumes (name → owner node) with a replica on each of the first nodes."""
    world = World(config)
    names = [f"node-{i}" for i in range(1, nodes + 1)]
    world.put(setting(DEFAULT_IM_IMAGE, NEW))
    for name in names:
        world.put(lh_node(name), kube_node(name), instance_manager(name), instance_manager(name, V1_IM, "v1"))
    for vol, owner in (volumes or {}).items():
        world.put(*volume(vol, owner, replicas))
        for node in names[:replicas]:
            world.put(replica(vol, node))
    return world
