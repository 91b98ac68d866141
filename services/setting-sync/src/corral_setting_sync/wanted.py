"""What the managed components must carry, per setting setting-sync applies, read from the stored
values the way Longhorn's webhooks read them (`normalize_value` then `validate_value`).

Each setting is parsed on its own, so one bad value blocks only itself: a value that fails
validation is recorded with Longhorn's message and never applied, while the other settings go on.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from corral_dangerzone.csi_limits import CsiResourceLimits, parse_csi_limits
from corral_dangerzone.errors import SettingNotSupportedError, SettingValueError
from corral_dangerzone.network import (
    ENDPOINT_NETWORK_INTERFACE,
    STORAGE_NETWORK_INTERFACE,
    cni_annotation,
)
from corral_dangerzone.node_selector import parse_node_selector
from corral_dangerzone.table import ApplyGroup, SettingName, default_value
from corral_dangerzone.tolerations import last_applied_annotation, parse_tolerations
from corral_dangerzone.validation import normalize_value, validate_value
from corral_model.longhorn import Toleration

N = SettingName

APPLIED_HERE: Mapping[SettingName, ApplyGroup] = {
    N.TAINT_TOLERATION: ApplyGroup.ALL_VOLUMES_DETACHED,
    N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR: ApplyGroup.ALL_VOLUMES_DETACHED,
    N.PRIORITY_CLASS: ApplyGroup.ALL_VOLUMES_DETACHED,
    N.STORAGE_NETWORK: ApplyGroup.ALL_VOLUMES_DETACHED,
    N.ENDPOINT_NETWORK_FOR_RWX_VOLUME: ApplyGroup.RWX_VOLUMES_DETACHED,
    N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS: ApplyGroup.NO_PRECONDITION,
    N.ENGINE_IMAGE_POD_LIVENESS_PROBE_PERIOD: ApplyGroup.NO_PRECONDITION,
    N.ENGINE_IMAGE_POD_LIVENESS_PROBE_TIMEOUT: ApplyGroup.NO_PRECONDITION,
    N.ENGINE_IMAGE_POD_LIVENESS_PROBE_FAILURE_THRESHOLD: ApplyGroup.NO_PRECONDITION,
}
"""The settings setting-sync writes to component templates and pods, with their §3.3 precondition
group (group D, judged per instance manager, is per_engine.py's)."""

ENGINE_IMAGE_PROBE = {
    N.ENGINE_IMAGE_POD_LIVENESS_PROBE_PERIOD: "periodSeconds",
    N.ENGINE_IMAGE_POD_LIVENESS_PROBE_TIMEOUT: "timeoutSeconds",
    N.ENGINE_IMAGE_POD_LIVENESS_PROBE_FAILURE_THRESHOLD: "failureThreshold",
}
"""The engine-image DaemonSets' liveness-probe field each probe setting sets (§3.3 group C)."""


class Wanted(msgspec.Struct, frozen=True, kw_only=True):
    """The parsed values of the settings applied here (defaults until a Setting says otherwise)."""

    tolerations: tuple[Toleration, ...] = ()
    last_applied: str = "[]"
    """The `longhorn.io/last-applied-tolerations` text for `tolerations`."""
    node_selector: Mapping[str, str] = {}
    priority_class: str = ""
    storage_network_annotation: str = ""
    """IM and backing-image-manager pods' CNI annotation ("" = absent)."""
    endpoint_network_annotation: str | None = None
    """The csi-plugin template's CNI annotation (None = must be absent)."""
    csi_limits: CsiResourceLimits = CsiResourceLimits()
    probe: Mapping[str, int] = {}
    """Engine-image liveness probe: `periodSeconds`/`timeoutSeconds`/`failureThreshold` → value."""


def check(name: SettingName, raw: str) -> str | None:
    """Longhorn's validation message for `raw`, or None when the value is valid."""
    try:
        validate_value(name, normalize_value(name, raw))
    except (SettingValueError, SettingNotSupportedError) as err:
        return str(err)
    return None


def with_value(wanted: Wanted, name: SettingName, raw: str) -> Wanted:
    """`wanted` with `name` read from `raw` (already validated)."""
    replace = msgspec.structs.replace
    if name is N.TAINT_TOLERATION:
        tolerations = parse_tolerations(raw)
        return replace(wanted, tolerations=tolerations, last_applied=last_applied_annotation(tolerations))
    if name is N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR:
        return replace(wanted, node_selector=parse_node_selector(raw))
    if name is N.PRIORITY_CLASS:
        return replace(wanted, priority_class=raw)
    if name is N.STORAGE_NETWORK:
        return replace(wanted, storage_network_annotation=cni_annotation(raw, STORAGE_NETWORK_INTERFACE))
    if name is N.ENDPOINT_NETWORK_FOR_RWX_VOLUME:
        annotation = cni_annotation(raw, ENDPOINT_NETWORK_INTERFACE) if raw else None
        return replace(wanted, endpoint_network_annotation=annotation)
    if name is N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS:
        return replace(wanted, csi_limits=parse_csi_limits(raw))
    if name in ENGINE_IMAGE_PROBE:
        return replace(wanted, probe={**wanted.probe, ENGINE_IMAGE_PROBE[name]: int(raw)})
    raise KeyError(name)


def defaults() -> Wanted:
    wanted = Wanted()
    for name in APPLIED_HERE:
        wanted = with_value(wanted, name, default_value(name))
    return wanted
