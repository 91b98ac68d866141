"""Kubernetes resource quantities, exactly enough to compare what Longhorn compares.

Longhorn compares CPU requests and hugepage limits as quantities (`0.25` equals `250m`, `2Gi`
equals `2048Mi`), never as strings, so a decider that compared strings would restart pods Longhorn
leaves alone. Values are exact `Fraction`s.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from corral_dangerzone.errors import SettingValueError

_QUANTITY = re.compile(
    r"(?P<sign>[+-]?)(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?P<suffix>[eE][+-]?[0-9]+|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?"
)
_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_REGEX_TEXT = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


def parse_quantity(text: str) -> Fraction:
    """A quantity string as an exact number; anything else is Kubernetes' parse error."""
    match = _QUANTITY.fullmatch(text.strip())
    if match is None:
        raise SettingValueError(f"quantities must match the regular expression '{_REGEX_TEXT}'")
    value = Fraction(match["number"])
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        value *= 1024 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= Fraction(10) ** _DECIMAL[suffix]
    else:
        value *= Fraction(10) ** int(suffix[1:])
    return -value if match["sign"] == "-" else value


def milli_value(text: str) -> int:
    """`Quantity.MilliValue()`: thousandths, rounded up."""
    return math.ceil(parse_quantity(text) * 1000)


def same_quantity(a: str | None, b: str | None) -> bool:
    """Equal as quantities; a missing quantity is zero."""
    return parse_quantity(a or "0") == parse_quantity(b or "0")


_BINARY_SUFFIXES = (("Ei", 6), ("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1))
_DECIMAL_SUFFIXES = (
    ("E", 18),
    ("P", 15),
    ("T", 12),
    ("G", 9),
    ("M", 6),
    ("k", 3),
    ("", 0),
    ("m", -3),
    ("u", -6),
)


def canonical_quantity(text: str) -> str:
    """`Quantity.String()` for the whole-number quantities Longhorn prints in messages: the largest
    suffix of the input's own family (binary `Ki…Ei` or decimal) that keeps the number whole."""
    value = parse_quantity(text)
    if value == 0:
        return "0"
    match = _QUANTITY.fullmatch(text.strip())
    if match is not None and (match["suffix"] or "") in _BINARY and value.denominator == 1:
        for suffix, power in _BINARY_SUFFIXES:
            if value % (1024**power) == 0:
                return f"{value // 1024**power}{suffix}"
        return str(value)
    for suffix, exponent in _DECIMAL_SUFFIXES:
        scaled = value / Fraction(10) ** exponent
        if scaled.denominator == 1:
            return f"{scaled}{suffix}"
    return f"{math.ceil(value * 10**9)}n"
