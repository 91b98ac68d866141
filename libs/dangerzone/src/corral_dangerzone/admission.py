"""The cluster-dependent half of Longhorn's setting validation (§3.2, the datastore's
`ValidateSetting`), as a pure function over the facts it reads.

The sandbox's admission webhook and `corral` explanations need to refuse the same values Longhorn
refuses (a missing PriorityClass, disabling an engine that still has engine instances, enabling v2
without hugepage capacity, CPU cores without a static CPU policy), with the same text. The caller
gathers the facts; nothing here reads the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import msgspec

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.gostrconv import parse_bool, parse_int
from corral_dangerzone.quantity import canonical_quantity, parse_quantity
from corral_dangerzone.table import SettingName, definition
from corral_dangerzone.validation import validate_value
from corral_dangerzone.values import engine_value

N = SettingName
AUTO_CLEANUP_SYSTEM_GENERATED_SNAPSHOT = "auto-cleanup-system-generated-snapshot"


class NodeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """One Longhorn node as the checks see it."""

    name: str
    available: bool = True
    """False when the node is down, deleted or has no manager pod (skipped by the hugepage check)."""
    has_kube_node: bool = True
    v2_disabled: bool = False
    """Labelled `node.longhorn.io/disable-v2-data-engine=true`."""
    hugepages_2mi_capacity: str | None = None
    """`status.capacity["hugepages-2Mi"]` of the Kubernetes node; None when absent."""
    cpu_policy: str = ""
    """The Longhorn node's `status.cpuPolicy`."""


class ClusterFacts(msgspec.Struct, frozen=True, kw_only=True):
    current_values: Mapping[str, str] = {}
    """Stored setting values (a missing one reads as its default)."""
    priority_classes: frozenset[str] = frozenset()
    engines_with_instances: frozenset[str] = frozenset()
    """Engines ("v1"/"v2") with an engine or engine-frontend instance on an engine-type or aio IM."""
    nodes: tuple[NodeFacts, ...] = ()
    auto_cleanup_system_generated_snapshot: bool = True

    def current(self, name: str) -> str:
        if name in self.current_values:
            return self.current_values[name]
        if name == AUTO_CLEANUP_SYSTEM_GENERATED_SNAPSHOT:
            return "true" if self.auto_cleanup_system_generated_snapshot else "false"
        return definition(name).default


def _engine_toggle(engine: str, name: str, value: str, facts: ClusterFacts) -> None:
    if facts.current(name) == value:
        return
    enabled = parse_bool(value)
    if not enabled and engine in facts.engines_with_instances:
        raise SettingValueError(
            f"cannot apply {name} setting to Longhorn workloads when there are attached {engine} volumes"
        )
    if engine != "v2":
        return
    hugepages = engine_value(
        N.DATA_ENGINE_HUGEPAGE_ENABLED, facts.current(N.DATA_ENGINE_HUGEPAGE_ENABLED), "v2"
    )
    memory = engine_value(N.DATA_ENGINE_MEMORY_SIZE, facts.current(N.DATA_ENGINE_MEMORY_SIZE), "v2")
    requested = f"{memory}Mi"
    for node in facts.nodes:
        if not node.available or not node.has_kube_node or node.v2_disabled:
            continue
        if enabled and hugepages:
            if node.hugepages_2mi_capacity is None:
                raise SettingValueError(f"failed to get hugepages-2Mi capacity for node {node.name}")
            if parse_quantity(node.hugepages_2mi_capacity) < parse_quantity(requested):
                raise SettingValueError(
                    f"not enough hugepages-2Mi capacity for node {node.name}, "
                    f"requested {canonical_quantity(requested)}, "
                    f"capacity {canonical_quantity(node.hugepages_2mi_capacity)}"
                )


def _core_number(cores: int, engine: str, facts: ClusterFacts) -> None:
    if cores < 0:
        raise SettingValueError(f"CPU core number for data engine {engine} cannot be negative")
    if cores > 0:
        if not all(node.cpu_policy.lower() == "static" for node in facts.nodes):
            raise SettingValueError(
                f"CPU core number for data engine {engine} cannot be set to {cores} "
                "when not all nodes have CPU manager policy configured"
            )
        return
    mask = engine_value(N.DATA_ENGINE_CPU_MASK, facts.current(N.DATA_ENGINE_CPU_MASK), engine)
    if mask in ("0", "0x0"):
        raise SettingValueError(
            f"CPU core number for data engine {engine} cannot be set to 0 "
            "when data engine CPU mask is set to 0"
        )


def _core_numbers(value: str, facts: ClusterFacts) -> None:
    trimmed = value.strip()
    try:
        per_engine = json.loads(trimmed)
    except json.JSONDecodeError:
        try:
            cores = parse_int(trimmed, func="strconv.Atoi")
        except SettingValueError as err:
            raise err.wrap(f'failed to convert CPU core number setting value "{value}" to integer') from None
        _core_number(cores, "v2", facts)
        return
    for engine, text in sorted(dict(per_engine).items()):
        try:
            cores = parse_int(str(text), func="strconv.Atoi")
        except SettingValueError as err:
            raise err.wrap(
                f"failed to convert CPU core number {text} for data engine {engine} to integer"
            ) from None
        _core_number(cores, engine, facts)


def _cluster_checks(name: str, value: str, facts: ClusterFacts) -> None:
    if name == N.PRIORITY_CLASS:
        if value and value not in facts.priority_classes:
            raise SettingValueError(
                f"failed to get priority class {value} before modifying priority class setting: "
                f'priorityclasses.scheduling.k8s.io "{value}" not found'
            )
    elif name == N.V1_DATA_ENGINE:
        _engine_toggle("v1", name, value, facts)
    elif name == N.V2_DATA_ENGINE:
        _engine_toggle("v2", name, value, facts)
    elif name == N.DISABLE_SNAPSHOT_PURGE:
        # Longhorn compares the raw string with "true" here, not the parsed bool.
        if value == "true" and parse_bool(facts.current(AUTO_CLEANUP_SYSTEM_GENERATED_SNAPSHOT)):
            raise SettingValueError(
                f"cannot set {name} setting to true "
                f"when {AUTO_CLEANUP_SYSTEM_GENERATED_SNAPSHOT} setting is true"
            )
    elif name == N.DATA_ENGINE_NUMBER_OF_CPU_CORES:
        _core_numbers(value, facts)


def validate_with_cluster(name: str, value: str, facts: ClusterFacts) -> None:
    """Longhorn's full validating-webhook check of a (normalised) danger-zone value."""
    try:
        validate_value(name, value)
        _cluster_checks(name, value, facts)
    except SettingValueError as err:
        raise err.wrap(f"failed to validate setting {name} with invalid value {value}") from None
