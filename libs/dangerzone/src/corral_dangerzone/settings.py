"""A typed snapshot of every danger-zone setting, read from the Settings a decider holds.

The pod-encoding and sync rules (§4.4, §4.5) each need several settings at once, parsed; reading
them in one place means one rule for "missing Setting object = its default" (Longhorn's
auto-filling read) and one for per-engine lookups. A stored value that does not parse raises
`SettingValueError` naming the setting, where Longhorn's reader would fail its sync too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

import msgspec

from corral_dangerzone.csi_limits import CsiResourceLimits, parse_csi_limits
from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.node_selector import parse_node_selector
from corral_dangerzone.table import ALL_ENGINES, DANGER_ZONE, SettingName, definition
from corral_dangerzone.tolerations import parse_tolerations
from corral_dangerzone.values import Scalar, parse_engine_values
from corral_model.longhorn import Setting, Toleration

N = SettingName
T = TypeVar("T", bool, int, float, str)


def _typed(name: SettingName, stored: Mapping[str, str], kind: type[T]) -> dict[str, T]:
    raw = stored[name.value]
    try:
        values = parse_engine_values(definition(name), raw)
    except SettingValueError as err:
        raise err.wrap(f"setting {name.value} has the invalid value {raw}") from None
    out: dict[str, T] = {}
    for engine, value in values.items():
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind):
            raise SettingValueError(f"setting {name.value} value {raw} is not a {kind.__name__}")
        out[engine] = value
    return out


def _one(name: SettingName, stored: Mapping[str, str], kind: type[T]) -> T:
    return _typed(name, stored, kind)[ALL_ENGINES]


class DangerZoneSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Parsed danger-zone settings. Per-engine fields map engine ("v1"/"v2") to the value."""

    raw: Mapping[str, str]
    """Every danger-zone setting's stored string (defaults filled in)."""
    tolerations: tuple[Toleration, ...]
    node_selector: Mapping[str, str]
    csi_limits: CsiResourceLimits
    priority_class: str
    storage_network: str
    endpoint_network_for_rwx_volume: str
    concurrent_replica_rebuild_per_node_limit: int
    concurrent_backing_image_replenish_per_node_limit: int
    guaranteed_instance_manager_cpu: Mapping[str, float]
    v1_data_engine: bool
    v2_data_engine: bool
    hugepage_enabled: Mapping[str, bool]
    memory_size_mib: Mapping[str, int]
    iobuf_large_pool_size: Mapping[str, int]
    iobuf_small_pool_size: Mapping[str, int]
    cpu_mask: Mapping[str, str]
    number_of_cpu_cores: Mapping[str, int]
    interrupt_mode_enabled: Mapping[str, bool]
    cpu_isolation_enabled: Mapping[str, bool]
    disable_snapshot_purge: bool
    engine_image_liveness_probe_period: int
    engine_image_liveness_probe_timeout: int
    engine_image_liveness_probe_failure_threshold: int
    instance_manager_liveness_probe_timeout: int
    log_path: str

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> DangerZoneSettings:
        """From name → stored value; names missing get their default, other names are ignored."""
        raw = {name.value: values.get(name.value, row.default) for name, row in DANGER_ZONE.items()}

        def r(name: SettingName) -> str:
            return raw[name.value]

        try:
            tolerations = parse_tolerations(r(N.TAINT_TOLERATION))
            node_selector = parse_node_selector(r(N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR))
            csi_limits = parse_csi_limits(r(N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS))
        except SettingValueError as err:
            raise err.wrap("a danger-zone setting has an invalid value") from None
        return cls(
            raw=raw,
            tolerations=tolerations,
            node_selector=node_selector,
            csi_limits=csi_limits,
            priority_class=r(N.PRIORITY_CLASS),
            storage_network=r(N.STORAGE_NETWORK),
            endpoint_network_for_rwx_volume=r(N.ENDPOINT_NETWORK_FOR_RWX_VOLUME),
            concurrent_replica_rebuild_per_node_limit=_one(
                N.CONCURRENT_REPLICA_REBUILD_PER_NODE_LIMIT, raw, int
            ),
            concurrent_backing_image_replenish_per_node_limit=_one(
                N.CONCURRENT_BACKING_IMAGE_REPLENISH_PER_NODE_LIMIT, raw, int
            ),
            guaranteed_instance_manager_cpu=_typed(N.GUARANTEED_INSTANCE_MANAGER_CPU, raw, float),
            v1_data_engine=_one(N.V1_DATA_ENGINE, raw, bool),
            v2_data_engine=_one(N.V2_DATA_ENGINE, raw, bool),
            hugepage_enabled=_typed(N.DATA_ENGINE_HUGEPAGE_ENABLED, raw, bool),
            memory_size_mib=_typed(N.DATA_ENGINE_MEMORY_SIZE, raw, int),
            iobuf_large_pool_size=_typed(N.DATA_ENGINE_IOBUF_LARGE_POOL_SIZE, raw, int),
            iobuf_small_pool_size=_typed(N.DATA_ENGINE_IOBUF_SMALL_POOL_SIZE, raw, int),
            cpu_mask=_typed(N.DATA_ENGINE_CPU_MASK, raw, str),
            number_of_cpu_cores=_typed(N.DATA_ENGINE_NUMBER_OF_CPU_CORES, raw, int),
            interrupt_mode_enabled=_typed(N.DATA_ENGINE_INTERRUPT_MODE_ENABLED, raw, bool),
            cpu_isolation_enabled=_typed(N.DATA_ENGINE_CPU_ISOLATION_ENABLED, raw, bool),
            disable_snapshot_purge=_one(N.DISABLE_SNAPSHOT_PURGE, raw, bool),
            engine_image_liveness_probe_period=_one(N.ENGINE_IMAGE_POD_LIVENESS_PROBE_PERIOD, raw, int),
            engine_image_liveness_probe_timeout=_one(N.ENGINE_IMAGE_POD_LIVENESS_PROBE_TIMEOUT, raw, int),
            engine_image_liveness_probe_failure_threshold=_one(
                N.ENGINE_IMAGE_POD_LIVENESS_PROBE_FAILURE_THRESHOLD, raw, int
            ),
            instance_manager_liveness_probe_timeout=_one(
                N.INSTANCE_MANAGER_POD_LIVENESS_PROBE_TIMEOUT, raw, int
            ),
            log_path=r(N.LOG_PATH),
        )

    @classmethod
    def from_settings(cls, settings: Iterable[Setting]) -> DangerZoneSettings:
        """From Setting objects (as a decider's view holds them)."""
        return cls.from_values({s.metadata.name: s.value for s in settings})

    @classmethod
    def defaults(cls) -> DangerZoneSettings:
        return cls.from_values({})

    def data_engine_enabled(self, engine: str) -> bool:
        return self.v1_data_engine if engine == "v1" else self.v2_data_engine

    def for_engine(self, values: Mapping[str, Scalar], name: SettingName, engine: str) -> Scalar:
        """One engine's entry of a per-engine field; a missing entry is Longhorn's read error."""
        if engine not in values:
            raise SettingValueError(
                f"the {name.value} setting value for data engine {engine} is not defined, "
                f"value is {self.raw[name.value]}"
            )
        return values[engine]
