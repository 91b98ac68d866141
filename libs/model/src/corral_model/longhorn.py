"""Slim Structs for the Kubernetes objects corral reads: only the fields some service looks at.

They keep the Kubernetes shape (metadata / spec / status, camelCase JSON) so the same Struct decodes
a watch event from the API server and an ObjectEvent from the bus, and so a command's JSON-pointer
path (`/spec/image`) names the same field in both. Unknown fields are ignored on decode: the watcher
drops `managedFields` and everything else corral does not read simply by not declaring it.
Field meanings: ../shared/spec/longhorn-behaviour.md. `gc=False`: these hold no reference cycles, and
a decision service keeps one per volume (100 k of them), so the collector should never walk them.

What real API servers send (tests/data/corpus): every field may be absent (Go `omitempty`), so every
field but `metadata.name` has a default; a field Longhorn's CRD marks `nullable: true` may be a
literal null, which a `Nullable[...]` field reads as empty (nullable.py); empty strings stay empty
strings; sizes are quoted int64 strings (`size: str`), other figures bare integers, int64 included.
`metadata` and its `name` are required: the API server never serves an object without them, and
without a name an object has no subject on the bus.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec.structs import force_setattr

from corral_model.nullable import Nullable


class _Slim(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True, gc=False):
    pass


class OwnerReference(_Slim, frozen=True):
    kind: str = ""
    name: str = ""
    uid: str = ""


class ObjectMeta(_Slim, frozen=True):
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()


class Condition(_Slim, frozen=True):
    type: str = ""
    status: str = "Unknown"
    reason: str = ""
    message: str = ""
    # Kept so a service rewriting a conditions list (im-restart's SettingSynced) keeps the others whole.
    # (nullable in the CRD: None when null or absent)
    last_probe_time: str | None = None
    last_transition_time: str | None = None


def condition_status(conditions: tuple[Condition, ...], type_: str) -> str:
    """Longhorn's rule: a missing condition reads as status Unknown."""
    for c in conditions:
        if c.type == type_:
            return c.status
    return "Unknown"


# --- Volume, Engine, Replica -------------------------------------------------------------------


class VolumeSpec(_Slim, frozen=True):
    image: str = ""
    data_engine: str = "v1"
    number_of_replicas: int = 3
    size: str = ""
    node_id: str = msgspec.field(default="", name="nodeID")
    migration_node_id: str = msgspec.field(default="", name="migrationNodeID")
    data_locality: str = "disabled"
    access_mode: str = "rwo"
    migratable: bool = False
    frontend: str = ""
    standby: bool = False
    stale_replica_timeout: int = 0
    target_node_id_for_live_upgrade: str = msgspec.field(default="", name="targetNodeIDForLiveUpgrade")


class VolumeStatus(_Slim, frozen=True):
    state: str = ""
    robustness: str = ""
    current_image: str = ""
    is_standby: bool = False
    expansion_required: bool = False
    restore_required: bool = False
    current_migration_node_id: str = msgspec.field(default="", name="currentMigrationNodeID")
    owner_id: str = msgspec.field(default="", name="ownerID")
    current_node_id: str = msgspec.field(default="", name="currentNodeID")
    current_size: str = ""
    current_target_node_id_for_live_upgrade: str = msgspec.field(
        default="", name="currentTargetNodeIDForLiveUpgrade"
    )


class Volume(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: VolumeSpec = VolumeSpec()
    status: VolumeStatus = VolumeStatus()


class EngineSpec(_Slim, frozen=True):
    volume_name: str = ""
    image: str = ""
    node_id: str = msgspec.field(default="", name="nodeID")
    data_engine: str = "v1"
    desire_state: str = ""
    volume_size: str = ""
    target_node_id_for_live_upgrade: str = msgspec.field(default="", name="targetNodeIDForLiveUpgrade")


class EngineStatus(_Slim, frozen=True):
    current_image: str = ""
    current_state: str = ""
    current_size: str = ""
    owner_id: str = msgspec.field(default="", name="ownerID")
    replica_mode_map: Nullable[dict[str, str]] = {}  # null on a stopped Engine
    current_target_node_id_for_live_upgrade: str = msgspec.field(
        default="", name="currentTargetNodeIDForLiveUpgrade"
    )

    def __post_init__(self) -> None:
        if self.replica_mode_map is None:
            force_setattr(self, "replica_mode_map", {})


class Engine(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: EngineSpec = EngineSpec()
    status: EngineStatus = EngineStatus()


class ReplicaSpec(_Slim, frozen=True):
    volume_name: str = ""
    engine_name: str = ""
    image: str = ""
    node_id: str = msgspec.field(default="", name="nodeID")
    data_engine: str = "v1"
    desire_state: str = ""
    failed_at: str = ""
    last_failed_at: str = ""


class ReplicaStatus(_Slim, frozen=True):
    current_image: str = ""
    current_state: str = ""
    owner_id: str = msgspec.field(default="", name="ownerID")


class Replica(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: ReplicaSpec = ReplicaSpec()
    status: ReplicaStatus = ReplicaStatus()


# --- EngineImage ---------------------------------------------------------------------------------


class EngineImageSpec(_Slim, frozen=True):
    image: str = ""


class EngineImageStatus(_Slim, frozen=True):
    owner_id: str = msgspec.field(default="", name="ownerID")
    state: str = ""
    ref_count: int = 0
    no_ref_since: str = ""
    incompatible: bool = False
    node_deployment_map: Nullable[dict[str, bool]] = {}
    conditions: Nullable[tuple[Condition, ...]] = ()
    version: str = ""
    git_commit: str = ""
    cli_api_version: int = msgspec.field(default=0, name="cliAPIVersion")
    cli_api_min_version: int = msgspec.field(default=0, name="cliAPIMinVersion")
    controller_api_version: int = msgspec.field(default=0, name="controllerAPIVersion")
    controller_api_min_version: int = msgspec.field(default=0, name="controllerAPIMinVersion")
    data_format_version: int = 0
    data_format_min_version: int = 0

    def __post_init__(self) -> None:
        if self.node_deployment_map is None:
            force_setattr(self, "node_deployment_map", {})
        if self.conditions is None:
            force_setattr(self, "conditions", ())


class EngineImage(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: EngineImageSpec = EngineImageSpec()
    status: EngineImageStatus = EngineImageStatus()


def engine_image_name(image: str) -> str:
    """Longhorn's EngineImage object name: `ei-` + first 8 hex chars of SHA-512 of the trimmed image."""
    import hashlib

    return "ei-" + hashlib.sha512(image.strip().encode()).hexdigest()[:8]


# --- Longhorn Node, Setting -----------------------------------------------------------------------


class NodeSpec(_Slim, frozen=True):
    allow_scheduling: bool = True
    instance_manager_cpu_request: int = msgspec.field(default=0, name="instanceManagerCPURequest")


class NodeStatus(_Slim, frozen=True):
    conditions: Nullable[tuple[Condition, ...]] = ()
    cpu_policy: str = ""

    def __post_init__(self) -> None:
        if self.conditions is None:
            force_setattr(self, "conditions", ())


class Node(_Slim, frozen=True):
    """A Longhorn Node CR (`nodes.longhorn.io`), not the Kubernetes Node (see KubeNode)."""

    metadata: ObjectMeta
    spec: NodeSpec = NodeSpec()
    status: NodeStatus = NodeStatus()


class SettingStatus(_Slim, frozen=True):
    applied: bool = False


class Setting(_Slim, frozen=True):
    """A Longhorn Setting: `value` sits at the top level, beside metadata, as in the CRD."""

    metadata: ObjectMeta
    value: str = ""
    status: SettingStatus = SettingStatus()


# --- InstanceManager ------------------------------------------------------------------------------


class InstanceProcessStatus(_Slim, frozen=True):
    state: str = ""


class InstanceProcess(_Slim, frozen=True):
    status: InstanceProcessStatus = InstanceProcessStatus()


class DataEngineV2Spec(_Slim, frozen=True):
    cpu_mask: str = ""
    cpu_isolation_enabled: str = ""


class DataEngineSpec(_Slim, frozen=True):
    v2: DataEngineV2Spec = DataEngineV2Spec()


class DataEngineV2Status(_Slim, frozen=True):
    cpu_mask: str = ""
    cpu_core_number: int = 0
    interrupt_mode_enabled: str = ""


class DataEngineStatus(_Slim, frozen=True):
    v2: DataEngineV2Status = DataEngineV2Status()


class InstanceManagerSpec(_Slim, frozen=True):
    node_id: str = msgspec.field(default="", name="nodeID")
    image: str = ""
    type: str = "aio"
    data_engine: str = "v1"
    data_engine_spec: DataEngineSpec = DataEngineSpec()


class InstanceManagerStatus(_Slim, frozen=True):
    current_state: str = ""
    ip: str = ""
    owner_id: str = msgspec.field(default="", name="ownerID")
    instance_engines: Nullable[dict[str, InstanceProcess]] = {}
    instance_engine_frontends: Nullable[dict[str, InstanceProcess]] = {}
    instance_replicas: Nullable[dict[str, InstanceProcess]] = {}
    conditions: Nullable[tuple[Condition, ...]] = ()  # from Longhorn 1.11
    data_engine_status: DataEngineStatus = DataEngineStatus()

    def __post_init__(self) -> None:
        if self.instance_engines is None:
            force_setattr(self, "instance_engines", {})
        if self.instance_engine_frontends is None:
            force_setattr(self, "instance_engine_frontends", {})
        if self.instance_replicas is None:
            force_setattr(self, "instance_replicas", {})
        if self.conditions is None:
            force_setattr(self, "conditions", ())


class InstanceManager(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: InstanceManagerSpec = InstanceManagerSpec()
    status: InstanceManagerStatus = InstanceManagerStatus()


# --- Kubernetes core / apps kinds -------------------------------------------------------------------


class Toleration(_Slim, frozen=True):
    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


class ResourceRequirements(_Slim, frozen=True):
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}


class Probe(_Slim, frozen=True):
    timeout_seconds: int = 1
    period_seconds: int = 10
    failure_threshold: int = 3
    initial_delay_seconds: int = 0


class VolumeMount(_Slim, frozen=True):
    name: str = ""
    mount_path: str = ""


class Container(_Slim, frozen=True):
    name: str = ""
    image: str = ""
    args: tuple[str, ...] = ()
    resources: ResourceRequirements = ResourceRequirements()
    liveness_probe: Probe | None = None
    # None (absent) differs from (): Longhorn's log-path check treats a container without mounts as synced.
    volume_mounts: tuple[VolumeMount, ...] | None = None


class HostPath(_Slim, frozen=True):
    path: str = ""


class PodVolume(_Slim, frozen=True):
    name: str = ""
    host_path: HostPath | None = None


class PodSpec(_Slim, frozen=True):
    node_name: str = ""
    node_selector: dict[str, str] | None = None
    tolerations: tuple[Toleration, ...] = ()
    priority_class_name: str = ""
    priority: int | None = None
    containers: tuple[Container, ...] = ()
    volumes: tuple[PodVolume, ...] = ()


class ContainerStatus(_Slim, frozen=True):
    name: str = ""
    ready: bool = False
    restart_count: int = 0


class PodStatus(_Slim, frozen=True):
    phase: str = ""
    pod_ip: str = msgspec.field(default="", name="podIP")
    container_statuses: tuple[ContainerStatus, ...] = ()


class Pod(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: PodSpec = PodSpec()
    status: PodStatus = PodStatus()


class PodTemplateMeta(_Slim, frozen=True):
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class PodTemplate(_Slim, frozen=True):
    metadata: PodTemplateMeta = PodTemplateMeta()
    spec: PodSpec = PodSpec()


class WorkloadSpec(_Slim, frozen=True):
    replicas: int | None = None
    template: PodTemplate = PodTemplate()


class WorkloadStatus(_Slim, frozen=True):
    observed_generation: int = 0
    desired_number_scheduled: int = 0
    updated_number_scheduled: int = 0
    number_ready: int = 0
    replicas: int = 0
    updated_replicas: int = 0
    ready_replicas: int = 0


class DaemonSet(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: WorkloadSpec = WorkloadSpec()
    status: WorkloadStatus = WorkloadStatus()


class Deployment(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: WorkloadSpec = WorkloadSpec()
    status: WorkloadStatus = WorkloadStatus()


class KubeNodeStatus(_Slim, frozen=True):
    allocatable: dict[str, str] = {}
    capacity: dict[str, str] = {}
    images: tuple[dict[str, Any], ...] = ()
    conditions: tuple[Condition, ...] = ()


class KubeNodeSpec(_Slim, frozen=True):
    unschedulable: bool = False


class KubeNode(_Slim, frozen=True):
    """A Kubernetes core/v1 Node (allocatable CPU, images, cordon)."""

    metadata: ObjectMeta
    spec: KubeNodeSpec = KubeNodeSpec()
    status: KubeNodeStatus = KubeNodeStatus()


# --- Snapshot (v2-upgrade's snapshot-before-upgrade) --------------------------------------------


class SnapshotSpec(_Slim, frozen=True):
    volume: str = ""
    create_snapshot: bool = False
    labels: Nullable[dict[str, str]] = {}

    def __post_init__(self) -> None:
        if self.labels is None:
            force_setattr(self, "labels", {})


class SnapshotStatus(_Slim, frozen=True):
    ready_to_use: bool = False
    checksum: str = ""
    error: str = ""


class Snapshot(_Slim, frozen=True):
    """A Longhorn Snapshot CR (`snapshots.longhorn.io`): v2-upgrade finds its own by label."""

    metadata: ObjectMeta
    spec: SnapshotSpec = SnapshotSpec()
    status: SnapshotStatus = SnapshotStatus()


# --- corral's own CRDs (v2 data-engine upgrade) ---------------------------------------------------
# The shape of longhorn-behaviour.md §5.2, plus a few fields of corral's own (marked "corral:") that
# keep in the CR what the prototype kept only in memory, so a restarted decider resumes from status.


class UpgradeNodeStatus(_Slim, frozen=True):
    """One node in a manager's `status.upgradeNodes`."""

    state: str = ""
    message: str = ""
    retries: int = 0
    """corral: failed attempts so far (bounded; an aborted-for-a-new-image attempt does not count)."""
    attempts: int = 0
    """corral: NodeDataEngineUpgrades finished for this node so far; the next one's name derives
    from it, so a restarted decider recreates exactly the object it would have created."""


class DataEngineUpgradeManagerSpec(_Slim, frozen=True):
    data_engine: str = "v2"
    nodes: Nullable[tuple[str, ...]] = ()
    start_time: str = ""
    """corral: RFC 3339; no node starts before it (ignored once the first node has started)."""

    def __post_init__(self) -> None:
        if self.nodes is None:
            force_setattr(self, "nodes", ())


class DataEngineUpgradeManagerStatus(_Slim, frozen=True):
    owner_id: str = msgspec.field(default="", name="ownerID")
    instance_manager_image: str = ""
    state: str = ""
    message: str = ""
    upgrading_node: str = ""
    upgrade_nodes: Nullable[dict[str, UpgradeNodeStatus]] = {}
    started_at: str = ""
    """corral: when the first node started (RFC 3339); from then on `spec.startTime` is ignored."""
    progress: str = ""
    """corral: "<done>/<nodes>" for the printer column."""
    state_since: str = ""
    """corral: when `state` last changed (RFC 3339), for the time in state."""

    def __post_init__(self) -> None:
        if self.upgrade_nodes is None:
            force_setattr(self, "upgrade_nodes", {})


class DataEngineUpgradeManager(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: DataEngineUpgradeManagerSpec = DataEngineUpgradeManagerSpec()
    status: DataEngineUpgradeManagerStatus = DataEngineUpgradeManagerStatus()


class NodeDataEngineUpgradeSpec(_Slim, frozen=True):
    node_id: str = msgspec.field(default="", name="nodeID")
    data_engine: str = "v2"
    instance_manager_image: str = ""
    data_engine_upgrade_manager: str = ""
    snapshot_before_upgrade: bool = False
    """corral: fixed when the node's attempt is created, so toggling the setting mid-flight does not
    affect the node in progress."""


class VolumeUpgradeStatus(_Slim, frozen=True):
    """One volume in a node upgrade's `status.volumes`."""

    state: str = ""
    message: str = ""
    previous_image: str = ""
    """corral: the volume's `spec.image` before the switch-over (what an abort restores)."""
    snapshot: str = ""
    """corral: the snapshot taken before the upgrade, when asked for."""
    since: str = ""
    """corral: when `state` last changed (RFC 3339), written with the change: the volume's time in
    its state for `corral progress v2-upgrade`."""


class NodeDataEngineUpgradeStatus(_Slim, frozen=True):
    owner_id: str = msgspec.field(default="", name="ownerID")
    volumes: Nullable[dict[str, VolumeUpgradeStatus]] = {}
    state: str = ""
    message: str = ""
    replica_volumes: Nullable[tuple[str, ...]] = ()
    """corral: the volumes that had a v2 replica on the node (rebuilding-replica waits for them)."""
    abort_reason: str = ""
    """corral: `timeout` or `target-image-changed` once the attempt is being aborted."""
    aborted_in: str = ""
    """corral: the state the abort interrupted (what the restore has to undo)."""
    progress: str = ""
    """corral: "<done>/<volumes>" for the printer column."""
    state_since: str = ""
    """corral: when `state` last changed (RFC 3339), for the time in state."""

    def __post_init__(self) -> None:
        if self.volumes is None:
            force_setattr(self, "volumes", {})
        if self.replica_volumes is None:
            force_setattr(self, "replica_volumes", ())


class NodeDataEngineUpgrade(_Slim, frozen=True):
    metadata: ObjectMeta
    spec: NodeDataEngineUpgradeSpec = NodeDataEngineUpgradeSpec()
    status: NodeDataEngineUpgradeStatus = NodeDataEngineUpgradeStatus()


LonghornObject = (
    Volume
    | Engine
    | Replica
    | EngineImage
    | Node
    | Setting
    | InstanceManager
    | Pod
    | DaemonSet
    | Deployment
    | KubeNode
    | Snapshot
    | DataEngineUpgradeManager
    | NodeDataEngineUpgrade
)
