"""`taint-toleration` syntax (§3.4) and the set comparison Longhorn uses for it (§3.3, §4.5).

Longhorn's parser has quirks that decide whether a value is admitted and which tolerations a pod
gets (`a=b=c:NoSchedule` is a toleration with everything empty; a bare `:` tolerates everything),
so this module reproduces them instead of parsing "sensibly". Tolerations are the model's
`Toleration` Struct, so parsed values compare directly with pod specs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

import msgspec

from corral_dangerzone.errors import SettingValueError
from corral_model.longhorn import Toleration

LAST_APPLIED_TOLERATIONS_ANNOTATION = "longhorn.io/last-applied-tolerations"
EXISTS, EQUAL = "Exists", "Equal"
EFFECTS = frozenset({"", "NoExecute", "NoSchedule", "PreferNoSchedule"})


def parse_toleration(item: str) -> Toleration:
    """One `key[=value]:effect` item, as Longhorn's `parseToleration`."""
    parts = item.split(":")
    if len(parts) != 2:
        raise SettingValueError("missing key/value and effect pair")
    key_value, effect = parts
    pair = key_value.split("=")
    # Longhorn's switch has no default branch: `a=b=c` leaves key, value and operator empty.
    key, value, operator = "", "", ""
    if len(pair) == 1:
        key, operator = key_value, EXISTS
    elif len(pair) == 2:
        key, value, operator = pair[0], pair[1], EQUAL
    if effect not in EFFECTS:
        raise SettingValueError(f"invalid effect: {effect}")
    return Toleration(key=key, operator=operator, value=value, effect=effect)


def parse_tolerations(setting: str) -> tuple[Toleration, ...]:
    """The whole setting: every space removed, split on `;`; an empty item (trailing `;`) is an error."""
    text = setting.replace(" ", "")
    if not text:
        return ()
    tolerations = []
    for item in text.split(";"):
        try:
            tolerations.append(parse_toleration(item))
        except SettingValueError as err:
            # Longhorn wraps with the (shadowed, nil) parse result, which prints as `nil`.
            raise err.wrap("failed to parse toleration: nil") from None
    return tuple(tolerations)


def render_toleration(toleration: Toleration) -> str:
    """The setting syntax for one toleration; only what the syntax can express (no seconds)."""
    if toleration.toleration_seconds is not None:
        raise ValueError("the taint-toleration setting cannot express tolerationSeconds")
    if toleration.operator == EXISTS and not toleration.value:
        head = toleration.key
    elif toleration.operator == EQUAL:
        head = f"{toleration.key}={toleration.value}"
    else:
        raise ValueError(f"the taint-toleration setting cannot express {toleration!r}")
    return f"{head}:{toleration.effect}"


def render_tolerations(tolerations: Iterable[Toleration]) -> str:
    return ";".join(render_toleration(t) for t in tolerations)


def toleration_identity(toleration: Toleration) -> str:
    """Longhorn's set identity: key+operator+value+effect concatenated (it checksums this string).

    Concatenation without separators is Longhorn's; two different tolerations can collide
    (`{key: "aExists"}` and `{key: "a", operator: "Exists"}`), and here they collide too.
    """
    return toleration.key + toleration.operator + toleration.value + toleration.effect


def toleration_set(tolerations: Iterable[Toleration]) -> Mapping[str, Toleration]:
    """`TolerationListToMap`: identity → toleration, a later duplicate replacing an earlier one."""
    return {toleration_identity(t): t for t in tolerations}


def same_toleration_set(a: Iterable[Toleration], b: Iterable[Toleration]) -> bool:
    """Longhorn deep-compares the two identity maps, so tolerationSeconds counts too."""
    return toleration_set(a) == toleration_set(b)


def distinct_tolerations(tolerations: Iterable[Toleration]) -> tuple[Toleration, ...]:
    """The pod's `spec.tolerations` (`GetDistinctTolerations`), in first-seen order here
    (Longhorn's order is map order, i.e. random)."""
    seen: dict[str, Toleration] = {}
    for t in tolerations:
        seen[toleration_identity(t)] = t
    return tuple(seen.values())


def _go_toleration_json(t: Toleration) -> dict[str, object]:
    # corev1.Toleration's JSON: every field omitempty.
    out: dict[str, object] = {}
    for field, value in (("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect)):
        if value:
            out[field] = value
    if t.toleration_seconds is not None:
        out["tolerationSeconds"] = t.toleration_seconds
    return out


def last_applied_annotation(tolerations: Iterable[Toleration]) -> str:
    """The `longhorn.io/last-applied-tolerations` value Longhorn writes: JSON of the parsed list
    (before de-duplication), `[]` when empty."""
    return json.dumps([_go_toleration_json(t) for t in tolerations], separators=(",", ":"))


def decode_last_applied(annotation: str | None) -> tuple[Toleration, ...]:
    """The annotation read back; missing or empty means `[]`. Malformed JSON is an error, as in Longhorn."""
    text = annotation or "[]"
    try:
        decoded = msgspec.json.decode(text.encode(), type=tuple[Toleration, ...] | None)
    except msgspec.DecodeError as err:
        raise SettingValueError(f"failed to decode {LAST_APPLIED_TOLERATIONS_ANNOTATION}: {err}") from None
    return decoded or ()
