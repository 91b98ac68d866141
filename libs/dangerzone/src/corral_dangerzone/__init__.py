"""Longhorn's danger-zone settings, once: the setting-sync and im-restart deciders and the sandbox
simulator all read settings through this package, so Longhorn's parsing rules cannot drift apart.

Pure: no I/O, no NATS, no Kubernetes client. Rules: ../shared/spec/longhorn-behaviour.md §3, §4.4,
§4.5; the modules and the deliberate differences from Longhorn are listed in this library's README.
"""

from corral_dangerzone.admission import ClusterFacts, NodeFacts, validate_with_cluster
from corral_dangerzone.cpu_request import instance_manager_cpu_request, same_cpu_request
from corral_dangerzone.errors import SettingNotSupportedError, SettingValueError
from corral_dangerzone.pod_spec import ExpectedInstanceManagerPod, expected_instance_manager_pod
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.synced import (
    PodContext,
    cpu_mask_applied,
    danger_zone_sync,
    hugepage_check,
    not_synced_message,
    unsynced_settings,
)
from corral_dangerzone.table import (
    DANGER_ZONE,
    ApplyGroup,
    DataEngine,
    SettingDefinition,
    SettingName,
    SettingType,
    default_value,
    definition,
    is_danger_zone,
    settings_in_group,
)
from corral_dangerzone.validation import normalize_value, validate_value
from corral_dangerzone.values import engine_value

__all__ = [
    "DANGER_ZONE",
    "ApplyGroup",
    "ClusterFacts",
    "DangerZoneSettings",
    "DataEngine",
    "ExpectedInstanceManagerPod",
    "NodeFacts",
    "PodContext",
    "SettingDefinition",
    "SettingName",
    "SettingNotSupportedError",
    "SettingType",
    "SettingValueError",
    "cpu_mask_applied",
    "danger_zone_sync",
    "default_value",
    "definition",
    "engine_value",
    "expected_instance_manager_pod",
    "hugepage_check",
    "instance_manager_cpu_request",
    "is_danger_zone",
    "normalize_value",
    "not_synced_message",
    "same_cpu_request",
    "settings_in_group",
    "unsynced_settings",
    "validate_value",
    "validate_with_cluster",
]
