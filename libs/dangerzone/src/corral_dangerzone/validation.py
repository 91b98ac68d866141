"""What Longhorn's setting webhooks do to a danger-zone value (§3.2), without the cluster:

* `normalize_value`: the mutating webhook (scalar → per-engine JSON, numbers and bools re-rendered,
  CPU lists → hex masks);
* `validate_value`: the generic `ValidateSetting` (required, typed parse, engine set, ranges, the
  per-setting syntax checks) with Longhorn's nested error messages.

Checks that need the cluster (priority class exists, engine instances, hugepage capacity, CPU
policy, the snapshot-purge pair) are in `admission`.
"""

from __future__ import annotations

import json
import math

from corral_dangerzone.cpumask import normalize_cpu_mask
from corral_dangerzone.csi_limits import parse_csi_limits
from corral_dangerzone.errors import SettingNotSupportedError, SettingValueError
from corral_dangerzone.gostrconv import format_float_f, format_float_v
from corral_dangerzone.network import validate_cni_network
from corral_dangerzone.node_selector import parse_node_selector
from corral_dangerzone.table import DANGER_ZONE, SettingDefinition, SettingName, SettingType
from corral_dangerzone.tolerations import parse_tolerations
from corral_dangerzone.values import EngineValues, Scalar, parse_engine_values

N = SettingName


def _definition(name: str, missing: str) -> SettingDefinition:
    try:
        return DANGER_ZONE[SettingName(name)]
    except ValueError:
        raise SettingNotSupportedError(missing) from None


def go_json_object(values: dict[str, str]) -> str:
    """Go's `json.Marshal` of a string map: sorted keys, no spaces, `<>&` and U+2028/9 escaped."""
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for raw, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")):
        text = text.replace(raw, escaped)
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _render(value: Scalar) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format_float_f(value)
    return str(value)


def normalize_value(name: str, value: str) -> str:
    """The value the mutating webhook stores, or its error (§3.2).

    Plain settings are stored as given. A data-engine-specific value becomes sorted JSON with one
    string per engine of the default (engines the default lacks are dropped); the CPU mask is
    normalised per engine.
    """
    defn = _definition(name, f"setting {name} does not exist")
    if not defn.data_engine_specific:
        return value
    try:
        typed = parse_engine_values(defn, value)
    except SettingValueError as err:
        raise err.wrap(f"failed to get valid value for setting {name}") from None
    kept = {engine: _render(v) for engine, v in typed.items() if engine in defn.default_engines}
    if defn.name is N.DATA_ENGINE_CPU_MASK:
        for engine in sorted(kept):
            try:
                kept[engine] = normalize_cpu_mask(kept[engine])
            except SettingValueError as err:
                raise err.wrap(f"failed to normalize CPU mask for data engine {engine}").wrap(
                    f"failed to normalize value for setting {name}"
                ) from None
    return go_json_object(kept)


def _bound_text(defn: SettingDefinition, bound: float) -> str:
    return str(int(bound)) if defn.type is SettingType.INT else format_float_v(bound)


def _check_range(defn: SettingDefinition, values: EngineValues) -> list[str]:
    errors: list[str] = []
    for engine, value in sorted(values.items()):
        assert isinstance(value, (int, float))
        shown = format_float_v(value) if isinstance(value, float) else str(value)
        if isinstance(value, float) and math.isnan(value):
            # Go's comparisons let NaN through every bound; corral refuses it (README).
            errors.append(f"value {shown} for data engine {engine} is not a number")
        elif defn.minimum is not None and value < defn.minimum:
            errors.append(
                f"value {shown} for data engine {engine} should be larger than or equal to "
                f"{_bound_text(defn, defn.minimum)}"
            )
        elif defn.maximum is not None and value > defn.maximum:
            errors.append(
                f"value {shown} for data engine {engine} should be less than or equal to "
                f"{_bound_text(defn, defn.maximum)}"
            )
    return errors


def _check_syntax(name: SettingName, value: str) -> None:
    try:
        if name is N.TAINT_TOLERATION:
            parse_tolerations(value)
        elif name is N.SYSTEM_MANAGED_COMPONENTS_NODE_SELECTOR:
            parse_node_selector(value)
        elif name is N.SYSTEM_MANAGED_CSI_COMPONENTS_RESOURCE_LIMITS:
            parse_csi_limits(value)
        elif name in (N.STORAGE_NETWORK, N.ENDPOINT_NETWORK_FOR_RWX_VOLUME):
            validate_cni_network(value)
        elif name is N.DATA_ENGINE_CPU_MASK:
            normalize_cpu_mask(value)
    except SettingValueError as err:
        raise err.wrap(f"the value of {name.value} is invalid") from None


def _validate_typed(defn: SettingDefinition, value: str) -> None:
    try:
        values = parse_engine_values(defn, value)
    except SettingValueError as err:
        raise err.wrap(f"failed to parse value {value} for setting {defn.display_name}") from None
    if not values:
        raise SettingValueError(
            f"failed to parse value {value} for setting {defn.display_name}, value cannot be empty"
        )
    defaults = defn.default_engines
    if len(values) != len(defaults):
        raise SettingValueError(f"mismatched data engines for setting {defn.display_name}")
    for engine in sorted(values):
        if engine not in defaults:
            raise SettingValueError(f"data engine {engine} is not supported for setting {defn.display_name}")
    if defn.type in (SettingType.INT, SettingType.FLOAT):
        if errors := _check_range(defn, values):
            raise SettingValueError("\n".join(errors))
    elif defn.type is SettingType.STRING:
        for text in values.values():
            assert isinstance(text, str)
            _check_syntax(defn.name, text)


def validate_value(name: str, value: str) -> None:
    """`types.ValidateSetting` for a danger-zone setting; raises with Longhorn's full message
    ("value V of settings X is invalid: …"). Run it on the *normalised* value, as Longhorn's
    validating webhook sees what the mutating one wrote."""
    try:
        defn = _definition(name, f"setting {name} is not supported")
        if defn.required and value == "":
            raise SettingValueError(f"required setting {name} shouldn't be empty")
        if defn.type is not SettingType.UNTYPED:
            _validate_typed(defn, value)
    except SettingValueError as err:
        raise err.wrap(f"value {value} of settings {name} is invalid") from None
