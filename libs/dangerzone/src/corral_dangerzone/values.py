"""Typed values of a setting, per data engine (§3.1, §3.2): a data-engine-specific value is a JSON
object keyed by engine (`{"v1":"12","v2":"12"}`), and a plain scalar stands for every engine the
default names.

Both Longhorn's validators and its readers go through this one reading, so it lives apart from the
validation rules. Numbers and bools use Go's `strconv` syntax; error text is Longhorn's.
"""

from __future__ import annotations

import json

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.gostrconv import parse_bool, parse_float, parse_int
from corral_dangerzone.table import ALL_ENGINES, SettingDefinition, SettingType, definition

Scalar = bool | int | float | str
EngineValues = dict[str, Scalar]


def is_json_format(text: str) -> bool:
    """Longhorn's `IsJSONFormat`: the text decodes as a JSON object (or `null`)."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return False
    return decoded is None or isinstance(decoded, dict)


def _json_word(value: object) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, list):
        return "array"
    return "object"


def json_engine_strings(defn: SettingDefinition, value: str) -> dict[str, str]:
    """The JSON form decoded into engine → string, as Go's `map[DataEngineType]string`."""
    if not defn.data_engine_specific:
        raise SettingValueError("JSON-formatted value is not supported for non-data-engine-specific setting")
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError as err:
        raise SettingValueError(f"failed to parse JSON-formatted value {value}: {err.msg}") from None
    if decoded is None:
        return {}
    if not isinstance(decoded, dict):
        raise SettingValueError(
            f"failed to parse JSON-formatted value {value}: json: cannot unmarshal {_json_word(decoded)}"
            " into Go value of type map[v1beta2.DataEngineType]string"
        )
    strings: dict[str, str] = {}
    for engine, raw in decoded.items():
        if raw is None:
            strings[engine] = ""
        elif isinstance(raw, str):
            strings[engine] = raw
        else:
            raise SettingValueError(
                f"failed to parse JSON-formatted value {value}: json: cannot unmarshal {_json_word(raw)}"
                " into Go value of type string"
            )
    return strings


def parse_scalar(type_: SettingType, text: str) -> Scalar:
    """One value in Go's syntax for the setting type (strings are returned unchanged)."""
    if type_ is SettingType.BOOL:
        return parse_bool(text)
    if type_ is SettingType.INT:
        return parse_int(text)
    if type_ is SettingType.FLOAT:
        return parse_float(text)
    if type_ is SettingType.STRING:
        return text
    raise SettingValueError(f"unsupported setting type {type_.value} for single value parsing")


def parse_engine_values(defn: SettingDefinition, value: str) -> EngineValues:
    """engine → typed value, the way Longhorn's validators read a raw value.

    JSON (for a data-engine-specific setting whose trimmed value is a JSON object): every entry is
    parsed, errors are joined one per line. Otherwise the trimmed scalar, expanded to the default's
    engines (or filed under "all" for a plain setting).
    """
    if defn.data_engine_specific and is_json_format(value.strip()):
        typed: EngineValues = {}
        errors: list[str] = []
        for engine, text in sorted(json_engine_strings(defn, value).items()):
            try:
                typed[engine] = parse_scalar(defn.type, text)
            except SettingValueError as err:
                errors.append(
                    f"failed to parse {defn.type.value} value {text} for data engine {engine}: {err}"
                )
        if errors:
            raise SettingValueError("\n".join(errors))
        return typed
    trimmed = value.strip()
    try:
        scalar = parse_scalar(defn.type, trimmed)
    except SettingValueError as err:
        if defn.type is SettingType.UNTYPED:
            raise
        raise err.wrap(f"failed to parse single {defn.type.value} value {value}") from None
    return {engine: scalar for engine in defn.default_engines}


def engine_value(name: str, value: str, engine: str) -> Scalar:
    """The typed value of setting `name` for one engine (`all` for a plain setting).

    An engine the value does not cover is an error, as in Longhorn's readers.
    """
    defn = definition(name)
    values = parse_engine_values(defn, value)
    key = engine if defn.data_engine_specific else ALL_ENGINES
    if key not in values:
        raise SettingValueError(
            f"the {name} setting value for data engine {engine} is not defined, value is {value}"
        )
    return values[key]
