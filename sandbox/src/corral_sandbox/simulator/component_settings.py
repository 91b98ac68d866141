"""What Longhorn's managed components carry from the danger-zone settings when they are created, read
through `corral_dangerzone` so the simulator, setting-sync and im-restart share one set of rules.

A Setting written around the webhook with a value that does not parse is read as its default here
(Longhorn would fail to create the component; the simulator keeps the cluster running and leaves
the refusal to the deciders, which must report such a value and never apply it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

from corral_dangerzone import DANGER_ZONE, DangerZoneSettings, SettingValueError, validate_value
from corral_dangerzone.network import (
    CNI_NETWORKS_ANNOTATION,
    STORAGE_NETWORK_INTERFACE,
    cni_annotation,
)
from corral_dangerzone.tolerations import (
    LAST_APPLIED_TOLERATIONS_ANNOTATION,
    distinct_tolerations,
    last_applied_annotation,
)

Obj = dict[str, Any]
MANAGED_BY = "longhorn.io/managed-by"
MANAGER = "longhorn-manager"
COMPONENT = "longhorn.io/component"

_cache: dict[tuple[str, ...], DangerZoneSettings] = {}


def current_settings(setting: Callable[[str], str]) -> DangerZoneSettings:
    """The danger-zone settings as the components would be built from them now."""
    values = {name.value: setting(name.value) for name in DANGER_ZONE}
    key = tuple(values.values())
    held = _cache.get(key)
    if held is None:
        try:
            held = DangerZoneSettings.from_values(values)
        except SettingValueError:
            held = DangerZoneSettings.from_values({k: v for k, v in values.items() if _valid(k, v)})
        if len(_cache) > 64:
            _cache.clear()
        _cache[key] = held
    return held


def _valid(name: str, value: str) -> bool:
    try:
        validate_value(name, value)
        DangerZoneSettings.from_values({name: value})
    except SettingValueError:
        return False
    return True


def tolerations(settings: DangerZoneSettings) -> list[Obj]:
    """`spec.tolerations` in Kubernetes' JSON (every field omitempty)."""
    decoded: list[Obj] = json.loads(last_applied_annotation(distinct_tolerations(settings.tolerations)))
    return decoded


def pod_fields(settings: DangerZoneSettings, *, storage_network: bool = False) -> tuple[Obj, Obj]:
    """(annotations, spec fields) of a managed pod or pod template: tolerations with their
    last-applied annotation, node selector, priority class; the `lhnet1` storage network for
    backing-image-manager pods."""
    annotations = {LAST_APPLIED_TOLERATIONS_ANNOTATION: last_applied_annotation(settings.tolerations)}
    if storage_network and settings.storage_network:
        annotations[CNI_NETWORKS_ANNOTATION] = cni_annotation(
            settings.storage_network, STORAGE_NETWORK_INTERFACE
        )
    spec: Obj = {"tolerations": tolerations(settings)}
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    return annotations, spec


def resources(settings: DangerZoneSettings, container: str) -> Obj:
    """A CSI container's resources from `system-managed-csi-components-resource-limits`."""
    built: Obj = msgspec.to_builtins(settings.csi_limits.resources_for(container))
    return {k: v for k, v in built.items() if v}
