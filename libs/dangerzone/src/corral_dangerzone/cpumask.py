"""`data-engine-cpu-mask` syntax (§3.2, §3.4): a hex mask or a CPU list, normalised to a hex mask.

Longhorn's mutating webhook rewrites a CPU list (`1-3,5`) into a lower-case hex mask (`0x2e`) but
keeps a hex value exactly as written (`0X3F` stays), and the IM controller compares the stored string
with what the instance manager recorded, so the normalised text, not only the CPU set, matters.
"""

from __future__ import annotations

from collections.abc import Iterable

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.gostrconv import go_quote, parse_int

MAX_CPU = 1023
"""Highest CPU number Longhorn accepts (1024 CPUs)."""
_MAX_HEX_DIGITS = (MAX_CPU + 1) // 4
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def _cpu_number(text: str) -> int:
    return parse_int(text, func="strconv.Atoi")


def _check_range(cpu: int) -> None:
    if cpu < 0 or cpu > MAX_CPU:
        raise SettingValueError(f"CPU number {cpu} is out of valid range (0-{MAX_CPU})")


def cpu_list_to_mask(cpu_list: str) -> int:
    """A CPU list (`0`, `0-3`, `1,2,3`, `1-3,5,7`, `(1-3),(5)`) as a bit mask."""
    text = cpu_list.replace("(", "").replace(")", "").strip()
    if not text:
        raise SettingValueError("CPU list is empty")
    mask = 0
    for raw_part in text.split(","):
        part = raw_part.strip()
        if not part:
            raise SettingValueError(f"invalid CPU list {go_quote(text)}: empty CPU entry")
        if "-" in part:
            start_text, end_text = part.split("-", 1)
            bounds = []
            for bound in (start_text, end_text):
                try:
                    bounds.append(_cpu_number(bound.strip()))
                except SettingValueError:
                    raise SettingValueError(
                        f"invalid CPU number {go_quote(bound)} in range {go_quote(part)}"
                    ) from None
            start, end = bounds
            _check_range(start)
            _check_range(end)
            if start > end:
                raise SettingValueError(f"invalid CPU range {go_quote(part)}: start ({start}) > end ({end})")
            mask |= ((1 << (end - start + 1)) - 1) << start
        else:
            try:
                cpu = _cpu_number(part)
            except SettingValueError:
                raise SettingValueError(f"invalid CPU number {go_quote(part)}") from None
            _check_range(cpu)
            mask |= 1 << cpu
    if mask == 0:
        raise SettingValueError("CPU list is empty")
    return mask


def hex_mask(mask: int) -> str:
    """Longhorn's rendering of a list-derived mask: `0x` + lower-case hex, no padding."""
    return f"0x{mask:x}"


def normalize_cpu_mask(value: str) -> str:
    """`NormalizeCPUMask`: a valid hex mask is returned as written (trimmed); a list becomes hex."""
    value = value.strip()
    if not value:
        raise SettingValueError("CPU mask value is empty")
    if value.startswith(("0x", "0X")):
        digits = value[2:]
        if not digits:
            raise SettingValueError(
                f"invalid hex CPU mask {go_quote(value)}: missing hex digits after prefix"
            )
        if len(digits) > _MAX_HEX_DIGITS:
            raise SettingValueError(f"CPU mask {go_quote(value)} exceeds maximum supported CPU {MAX_CPU}")
        for ch in digits:
            if ch not in _HEX_DIGITS:
                raise SettingValueError(
                    f"invalid hex CPU mask {go_quote(value)}: contains non-hex character {go_quote(ch)}"
                )
        if int(digits, 16) == 0:
            raise SettingValueError(f"CPU mask {go_quote(value)} is zero, at least one CPU must be selected")
        return value
    return hex_mask(cpu_list_to_mask(value))


def mask_value(value: str) -> int:
    """The CPU set a valid mask or list stands for, as an int bit mask."""
    return int(normalize_cpu_mask(value)[2:], 16)


def cpus_of_mask(mask: int) -> tuple[int, ...]:
    return tuple(cpu for cpu in range(mask.bit_length()) if mask >> cpu & 1)


def render_cpu_list(cpus: Iterable[int]) -> str:
    """The shortest CPU list for a set of CPUs: runs of three or more as ranges (`0-3,5`)."""
    ordered = sorted(set(cpus))
    if not ordered:
        raise ValueError("a CPU list needs at least one CPU")
    runs: list[tuple[int, int]] = []
    for cpu in ordered:
        if runs and cpu == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], cpu)
        else:
            runs.append((cpu, cpu))
    parts = []
    for start, end in runs:
        if start == end:
            parts.append(str(start))
        elif end == start + 1:
            parts.append(f"{start},{end}")
        else:
            parts.append(f"{start}-{end}")
    return ",".join(parts)
