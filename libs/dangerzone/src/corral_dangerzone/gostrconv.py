"""Go's `strconv` number and bool syntax, which Longhorn uses to read every typed setting.

Python's `int()`, `float()` and truthiness accept things Go refuses (`1_000`, ` 5 `, `٣`, `yes`) and
refuse things Go accepts (`0x1p-2`, `T`), so a setting that Longhorn's webhook admits could read
differently here without this module. Errors carry Go's `strconv` wording, because Longhorn wraps
them into the messages an operator sees.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from corral_dangerzone.errors import SettingValueError

_INT = re.compile(r"[+-]?[0-9]+")
_DECIMAL_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_HEX_FLOAT = re.compile(r"[+-]?0[xX](?:[0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+")
_SPECIAL_FLOAT = re.compile(r"(?i:[+-]?(?:inf|infinity)|nan)")
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def go_quote(text: str) -> str:
    """Go's `%q` for the printable strings settings hold (escapes quotes, backslashes, controls)."""
    out = ['"']
    for ch in text:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def parse_bool(text: str) -> bool:
    """`strconv.ParseBool`: exactly 1/t/T/TRUE/true/True or 0/f/F/FALSE/false/False."""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingValueError(f"strconv.ParseBool: parsing {go_quote(text)}: invalid syntax")


def parse_int(text: str, *, func: str = "strconv.ParseInt") -> int:
    """`strconv.ParseInt(text, 10, 64)` (or `Atoi`): ASCII digits with an optional sign, 64-bit."""
    if not _INT.fullmatch(text):
        raise SettingValueError(f"{func}: parsing {go_quote(text)}: invalid syntax")
    value = int(text)
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise SettingValueError(f"{func}: parsing {go_quote(text)}: value out of range")
    return value


def parse_float(text: str) -> float:
    """`strconv.ParseFloat(text, 64)`: decimal, hex (`0x1p-2`), inf/infinity/nan; overflow is an error."""
    if _SPECIAL_FLOAT.fullmatch(text):
        return float(text.lower().lstrip("+").replace("infinity", "inf"))
    if _HEX_FLOAT.fullmatch(text):
        negative = text.startswith("-")
        value = float.fromhex(text.lstrip("+-"))
        value = -value if negative else value
    elif _DECIMAL_FLOAT.fullmatch(text):
        value = float(text)
    else:
        raise SettingValueError(f"strconv.ParseFloat: parsing {go_quote(text)}: invalid syntax")
    if math.isinf(value):
        raise SettingValueError(f"strconv.ParseFloat: parsing {go_quote(text)}: value out of range")
    return value


def _shortest_digits(value: float) -> tuple[str, int]:
    """The shortest round-tripping digits of a finite non-zero |value| and its decimal exponent."""
    _, digits, exponent = Decimal(repr(abs(value))).normalize().as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits))
    return text, exponent + len(text) - 1


def format_float_f(value: float) -> str:
    """`strconv.FormatFloat(v, 'f', -1, 64)`: shortest digits, never an exponent (`20`, `12.5`)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(Decimal(repr(value)).normalize(), "f")


def format_float_v(value: float) -> str:
    """Go's `%v` for a float64: shortest `%g`, exponent form below 1e-4 or from 1e6 on (`1e+06`)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    digits, exponent = _shortest_digits(value)
    sign = "-" if value < 0 else ""
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    return sign + format_float_f(abs(value))
