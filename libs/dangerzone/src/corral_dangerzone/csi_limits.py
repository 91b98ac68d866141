"""`system-managed-csi-components-resource-limits` (§3.1, §3.3 group C): a JSON object of container
resources keyed by CSI component.

Longhorn unmarshals it with Go's encoding/json into a struct, which means: component keys match
case-insensitively, unknown keys are silently ignored, `null` (or "") means "nothing listed", and a
component that is not listed gets *empty* resources when the setting is applied. Quantities must
parse. This module keeps those rules and gives the typed value back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import msgspec

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.quantity import parse_quantity
from corral_model.longhorn import ResourceRequirements

CSI_COMPONENTS = (
    "csi-attacher",
    "csi-provisioner",
    "csi-resizer",
    "csi-snapshotter",
    "longhorn-csi-plugin",
    "node-driver-registrar",
    "longhorn-liveness-probe",
)
"""Deployments csi-attacher/provisioner/resizer/snapshotter; containers of the csi-plugin DaemonSet."""


class CsiResourceLimits(msgspec.Struct, frozen=True):
    """The parsed setting: component → resources, only for components the value lists."""

    components: Mapping[str, ResourceRequirements] = {}

    def resources_for(self, component: str) -> ResourceRequirements:
        """What the component's container must carry: its entry, or empty resources (§3.3)."""
        return self.components.get(component, ResourceRequirements())


def _type_word(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _fail(setting: str, reason: str) -> SettingValueError:
    return SettingValueError(f"failed to unmarshal CSI component resource limits {setting}: {reason}")


def _resource_list(setting: str, raw: object, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail(setting, f"json: cannot unmarshal {_type_word(raw)} into Go struct field {where}")
    out: dict[str, str] = {}
    for name, quantity in raw.items():
        if quantity is None:
            continue
        if isinstance(quantity, bool) or not isinstance(quantity, (str, int, float)):
            raise _fail(setting, "quantities must be a string or a number")
        text = quantity if isinstance(quantity, str) else json.dumps(quantity)
        try:
            parse_quantity(text)
        except SettingValueError as err:
            raise _fail(setting, err.message) from None
        out[name] = text
    return out


def _requirements(setting: str, raw: object) -> ResourceRequirements:
    if not isinstance(raw, dict):
        raise _fail(
            setting, f"json: cannot unmarshal {_type_word(raw)} into Go value of type v1.ResourceRequirements"
        )
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        lowered = key.lower()
        if lowered in ("limits", "requests"):
            fields[lowered] = _resource_list(setting, value, f"ResourceRequirements.{lowered}")
    return ResourceRequirements(**fields)


def parse_csi_limits(setting: str) -> CsiResourceLimits:
    text = setting.strip(" ")
    if not text:
        return CsiResourceLimits()
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError as err:
        raise _fail(setting, f"invalid JSON: {err.msg}") from None
    if decoded is None:
        return CsiResourceLimits()
    if not isinstance(decoded, dict):
        raise _fail(
            setting,
            f"json: cannot unmarshal {_type_word(decoded)} into Go value of type "
            "types.ComponentResourceLimits",
        )
    by_folded_name = {name.lower(): name for name in CSI_COMPONENTS}
    components: dict[str, ResourceRequirements] = {}
    for key, value in decoded.items():
        component = by_folded_name.get(key.lower())
        if component is None:
            continue  # encoding/json ignores fields the struct does not have
        if value is None:
            components.pop(component, None)
            continue
        components[component] = _requirements(setting, value)
    return CsiResourceLimits(components=components)


def render_csi_limits(limits: CsiResourceLimits) -> str:
    """A setting value that parses back to `limits` ("" when nothing is listed)."""
    if not limits.components:
        return ""
    body: dict[str, dict[str, dict[str, str]]] = {}
    for component, resources in limits.components.items():
        if component not in CSI_COMPONENTS:
            raise ValueError(f"unknown CSI component {component!r}")
        entry: dict[str, dict[str, str]] = {}
        if resources.limits:
            entry["limits"] = dict(resources.limits)
        if resources.requests:
            entry["requests"] = dict(resources.requests)
        body[component] = entry
    return json.dumps(body, separators=(",", ":"))
