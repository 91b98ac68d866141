"""Longhorn's danger-zone setting table (spec §3.1) and how the setting controller routes each one
(§3.3), so a caller can ask "is this danger-zone", "what is its default", "which engines does it
cover" and "what must hold before it is applied" without repeating Longhorn's list.

The list, types, defaults, ranges and display names are those of longhorn-manager `types/setting.go`
at the spec's HEAD; display names matter because Longhorn puts them in some error messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

import msgspec

from corral_dangerzone.errors import SettingNotSupportedError

DANGER_ZONE_CATEGORY = "danger Zone"
"""The Setting category string, spelt exactly as Longhorn does."""

DEFAULT_CONTROL_PATH = "/var/lib/longhorn"
"""Longhorn's control path when `LONGHORN_CONTROL_PATH` is unset; `log-path` defaults under it."""


class DataEngine(StrEnum):
    V1 = "v1"
    V2 = "v2"


ALL_ENGINES = "all"
"""The engine key Longhorn files a non-data-engine-specific value under (it shows in messages)."""


class SettingType(StrEnum):
    STRING = "string"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    UNTYPED = ""
    """`priority-class` has no type in Longhorn, so the generic validation skips it."""


class ApplyGroup(StrEnum):
    """How Longhorn's setting controller applies a danger-zone setting (§3.3 groups A-D)."""

    ALL_VOLUMES_DETACHED = "A"
    """Applied to managed components only when every volume is detached."""
    RWX_VOLUMES_DETACHED = "B"
    """Applied only when no non-migratable RWX volume has an attachment ticket."""
    NO_PRECONDITION = "C"
    """Applied at once (CSI resources, engine-image liveness probes)."""
    PER_DATA_ENGINE = "D"
    """Checked per data engine against engine instances (engine toggles, guaranteed CPU)."""
    CONSUMED_OTHER = "other"
    """Nothing in the setting controller; read where used (the IM controller restarts idle IM pods
    for the instance-manager ones, §4; the rebuild limits are read by the schedulers)."""


class SettingName(StrEnum):
    TAINT_TOLERATION = "taint-toleration"
    SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR = "system-managed-components-node-selector"
    SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS = "system-managed-csi-components-resource-limits"
    PRIORITY_CLASS = "priority-class"
    CONCURRENT_REPLICA_REBUILD_PER_NODE_LIMIT = "concurrent-replica-rebuild-per-node-limit"
    CONCURRENT_BACKING_IMAGE_REPLENISH_PER_NODE_LIMIT = "concurrent-backing-image-replenish-per-node-limit"
    GUARANTEED_INSTANCE_MANAGER_CPU = "guaranteed-instance-manager-cpu"
    STORAGE_NETWORK = "storage-network"
    ENDPOINT_NETWORK_FOR_RWX_VOLUME = "endpoint-network-for-rwx-volume"
    V1_DATA_ENGINE = "v1-data-engine"
    V2_DATA_ENGINE = "v2-data-engine"
    DATA_ENGINE_HUGEPAGE_ENABLED = "data-engine-hugepage-enabled"
    DATA_ENGINE_MEMORY_SIZE = "data-engine-memory-size"
    DATA_ENGINE_IOBUF_LARGE_POOL_SIZE = "data-engine-iobuf-large-pool-size"
    DATA_ENGINE_IOBUF_SMALL_POOL_SIZE = "data-engine-iobuf-small-pool-size"
    DATA_ENGINE_CPU_MASK = "data-engine-cpu-mask"
    DATA_ENGINE_NUMBER_OF_CPU_CORES = "data-engine-number-of-cpu-cores"
    DATA_ENGINE_INTERRUPT_MODE_ENABLED = "data-engine-interrupt-mode-enabled"
    DATA_ENGINE_CPU_ISOLATION_ENABLED = "data-engine-cpu-isolation-enabled"
    DISABLE_SNAPSHOT_PURGE = "disable-snapshot-purge"
    ENGINE_IMAGE_POD_LIVENESS_PROBE_PERIOD = "engine-image-pod-liveness-probe-period"
    ENGINE_IMAGE_POD_LIVENESS_PROBE_TIMEOUT = "engine-image-pod-liveness-probe-timeout"
    ENGINE_IMAGE_POD_LIVENESS_PROBE_FAILURE_THRESHOLD = "engine-image-pod-liveness-probe-failure-threshold"
    INSTANCE_MANAGER_POD_LIVENESS_PROBE_TIMEOUT = "instance-manager-pod-liveness-probe-timeout"
    LOG_PATH = "log-path"


SPDK_DEFAULT_IOBUF_LARGE_POOL_SIZE = 1024
SPDK_DEFAULT_IOBUF_SMALL_POOL_SIZE = 8192


class SettingDefinition(msgspec.Struct, frozen=True, kw_only=True):
    """One row of §3.1. `minimum`/`maximum` are inclusive; None means unbounded."""

    name: SettingName
    display_name: str
    type: SettingType
    default: str
    group: ApplyGroup
    required: bool = False
    data_engine_specific: bool = False
    minimum: float | None = None
    maximum: float | None = None

    @property
    def default_engines(self) -> tuple[str, ...]:
        """The engines the default covers: its JSON keys (sorted), or ("all",) for a plain setting.

        Longhorn expands a scalar to exactly these and refuses any other engine set (§3.2).
        """
        if not self.data_engine_specific:
            return (ALL_ENGINES,)
        keys: dict[str, str] = json.loads(self.default)
        return tuple(sorted(keys))


def default_log_path(control_path: str = DEFAULT_CONTROL_PATH) -> str:
    """`<control-path>/logs`, Longhorn's `log-path` default and fallback."""
    return control_path.rstrip("/") + "/logs" if control_path.rstrip("/") else "/logs"


def _row(
    name: SettingName,
    display_name: str,
    type_: SettingType,
    default: str,
    group: ApplyGroup,
    *,
    required: bool = True,
    des: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
) -> SettingDefinition:
    return SettingDefinition(
        name=name,
        display_name=display_name,
        type=type_,
        default=default,
        group=group,
        required=required,
        data_engine_specific=des,
        minimum=minimum,
        maximum=maximum,
    )


_S, _I, _F, _B = SettingType.STRING, SettingType.INT, SettingType.FLOAT, SettingType.BOOL
_A, _RWX, _C, _D, _OTHER = (
    ApplyGroup.ALL_VOLUMES_DETACHED,
    ApplyGroup.RWX_VOLUMES_DETACHED,
    ApplyGroup.NO_PRECONDITION,
    ApplyGroup.PER_DATA_ENGINE,
    ApplyGroup.CONSUMED_OTHER,
)
N = SettingName

_ROWS = (
    _row(N.TAINT_TOLERATION, "Kubernetes Taint Toleration", _S, "", _A, required=False),
    _row(
        N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR,
        "System Managed Components Node Selector",
        _S,
        "",
        _A,
        required=False,
    ),
    _row(
        N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS,
        "System Managed CSI Components Resource Limits",
        _S,
        "",
        _C,
        required=False,
    ),
    _row(N.PRIORITY_CLASS, "Priority Class", SettingType.UNTYPED, "", _A, required=False),
    _row(
        N.CONCURRENT_REPLICA_REBUILD_PER_NODE_LIMIT,
        "Concurrent Replica Rebuild Per Node Limit",
        _I,
        "5",
        _OTHER,
        minimum=0,
    ),
    _row(
        N.CONCURRENT_BACKING_IMAGE_REPLENISH_PER_NODE_LIMIT,
        "Concurrent Backing Image Replenish Per Node Limit",
        _I,
        "5",
        _OTHER,
        minimum=0,
    ),
    _row(
        N.GUARANTEED_INSTANCE_MANAGER_CPU,
        "Guaranteed Instance Manager CPU",
        _F,
        '{"v1":"12","v2":"12"}',
        _D,
        des=True,
        minimum=0,
        maximum=40,
    ),
    _row(N.STORAGE_NETWORK, "Storage Network", _S, "", _A, required=False),
    _row(N.ENDPOINT_NETWORK_FOR_RWX_VOLUME, "Endpoint Network for RWX Volume", _S, "", _RWX, required=False),
    _row(N.V1_DATA_ENGINE, "V1 Data Engine", _B, "true", _D),
    _row(N.V2_DATA_ENGINE, "V2 Data Engine", _B, "false", _D),
    _row(
        N.DATA_ENGINE_HUGEPAGE_ENABLED,
        "Data Engine Hugepage Enabled",
        _B,
        '{"v2":"true"}',
        _OTHER,
        des=True,
    ),
    _row(
        N.DATA_ENGINE_MEMORY_SIZE,
        "Data Engine Memory Size",
        _I,
        '{"v2":"2048"}',
        _OTHER,
        des=True,
        minimum=0,
    ),
    _row(
        N.DATA_ENGINE_IOBUF_LARGE_POOL_SIZE,
        "Data Engine iobuf Large Pool Size",
        _I,
        f'{{"v2":"{SPDK_DEFAULT_IOBUF_LARGE_POOL_SIZE}"}}',
        _OTHER,
        des=True,
        minimum=SPDK_DEFAULT_IOBUF_LARGE_POOL_SIZE,
    ),
    _row(
        N.DATA_ENGINE_IOBUF_SMALL_POOL_SIZE,
        "Data Engine iobuf Small Pool Size",
        _I,
        f'{{"v2":"{SPDK_DEFAULT_IOBUF_SMALL_POOL_SIZE}"}}',
        _OTHER,
        des=True,
        minimum=SPDK_DEFAULT_IOBUF_SMALL_POOL_SIZE,
    ),
    _row(N.DATA_ENGINE_CPU_MASK, "Data Engine CPU Mask", _S, '{"v2":"0x3"}', _OTHER, des=True),
    _row(
        N.DATA_ENGINE_NUMBER_OF_CPU_CORES,
        "Data Engine Number of CPU Cores",
        _I,
        '{"v2":"0"}',
        _OTHER,
        des=True,
        minimum=0,
    ),
    _row(
        N.DATA_ENGINE_INTERRUPT_MODE_ENABLED,
        "Enable Interrupt Mode for Data Engine",
        _B,
        '{"v2":"false"}',
        _OTHER,
        des=True,
    ),
    _row(
        N.DATA_ENGINE_CPU_ISOLATION_ENABLED,
        "Enable Host CPU Isolation for Data Engine",
        _B,
        '{"v2":"true"}',
        _OTHER,
        des=True,
    ),
    _row(N.DISABLE_SNAPSHOT_PURGE, "Disable Snapshot Purge", _B, "false", _OTHER),
    _row(
        N.ENGINE_IMAGE_POD_LIVENESS_PROBE_PERIOD,
        "Engine Image Pod Liveness Probe Period",
        _I,
        "5",
        _C,
        minimum=1,
        maximum=60,
    ),
    _row(
        N.ENGINE_IMAGE_POD_LIVENESS_PROBE_TIMEOUT,
        "Engine Image Pod Liveness Probe Timeout",
        _I,
        "4",
        _C,
        minimum=1,
        maximum=60,
    ),
    _row(
        N.ENGINE_IMAGE_POD_LIVENESS_PROBE_FAILURE_THRESHOLD,
        "Engine Image Pod Liveness Probe Failure Threshold",
        _I,
        "3",
        _C,
        minimum=1,
        maximum=60,
    ),
    _row(
        N.INSTANCE_MANAGER_POD_LIVENESS_PROBE_TIMEOUT,
        "Instance Manager Pod Liveness Probe Timeout",
        _I,
        "10",
        _OTHER,
        minimum=1,
        maximum=60,
    ),
    _row(N.LOG_PATH, "Log Path", _S, default_log_path(), _OTHER),
)

DANGER_ZONE: Mapping[SettingName, SettingDefinition] = MappingProxyType({row.name: row for row in _ROWS})
"""Every danger-zone setting, in the order of the spec's table (also the order of unsynced lists)."""


def is_danger_zone(name: str) -> bool:
    return name in DANGER_ZONE


def definition(name: str) -> SettingDefinition:
    """The row for `name`; an unknown name is Longhorn's "setting X is not supported"."""
    try:
        return DANGER_ZONE[SettingName(name)]
    except ValueError:
        raise SettingNotSupportedError(f"setting {name} is not supported") from None


def default_value(name: str) -> str:
    return definition(name).default


def settings_in_group(group: ApplyGroup) -> tuple[SettingName, ...]:
    return tuple(row.name for row in _ROWS if row.group is group)
