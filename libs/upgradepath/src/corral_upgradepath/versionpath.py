"""The Longhorn version path: may a cluster at version C be taken over by a build of version T?

Rules and messages: longhorn-behaviour.md §2.2 step 3 (`checkLHUpgradePath`). One minor step at a
time (two for the distros listed at build time), a major step only from minor 30 or later, and no
downgrade of any size; a prerelease counts below its release.

Where this deliberately differs from the Go code (each would otherwise crash or mislead):
* a current version without a minor part (`v1`) makes Go panic; here it is a parse error;
* a current version that Go's `Atoi` can split but that is not valid semver (`1.31.0`, `v1.05.0`)
  makes Go compare `semver.Major("") < "v1"` and take the *major upgrade* branch, so `1.31.0 →
  v1.11.0` passes there; here it is a parse error naming the value;
* Go's "failed to parse current … major/minor version" prints the target version instead of the
  current one; here it prints the current one, which is the value the operator must look at.
"""

from __future__ import annotations

from typing import NamedTuple

from corral_upgradepath import gosemver

# `LonghornV1ToV2MinorVersionNum`: the lowest minor of major N that may step to major N+1.
MIN_MINOR_FOR_MAJOR_UPGRADE = 30

_INT64_MAX = 2**63 - 1


class PathVerdict(NamedTuple):
    allowed: bool
    message: str


class _ParseError(ValueError):
    pass


def _unsupported(what: str) -> PathVerdict:
    return PathVerdict(False, f"failed to upgrade since {what} is not supported")


def _go_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _atoi(text: str) -> int:
    """Go's `strconv.Atoi`: optional sign, ASCII decimal digits, int64 range; Go's error text."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise _ParseError(f"strconv.Atoi: parsing {_go_quote(text)}: invalid syntax")
    value = int(text)
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise _ParseError(f"strconv.Atoi: parsing {_go_quote(text)}: value out of range")
    return value


def _major_minor(version: str) -> tuple[int, int]:
    """Longhorn's `getMajorMinorInt`: strip one leading `v`, split on `.`, Atoi the first two parts."""
    parts = (version[1:] if version.startswith("v") else version).split(".")
    major = _atoi(parts[0])
    if len(parts) < 2:
        raise _ParseError(f"no minor version in {_go_quote(version)}")
    return major, _atoi(parts[1])


def two_minor_distro(distro: str, two_minor_distros: tuple[str, ...]) -> str | None:
    """The distro, normalised, when it may skip one minor version; trimmed and case-insensitive."""
    wanted = distro.strip().lower()
    if not wanted:
        return None
    # Longhorn splits one comma-separated build string; accept entries that still hold commas.
    candidates = (c.strip().lower() for entry in two_minor_distros for c in entry.split(","))
    return wanted if wanted in candidates else None


def check_version_path(
    current: str, target: str, *, distro: str = "", two_minor_distros: tuple[str, ...] = ()
) -> PathVerdict:
    if current == "":
        return PathVerdict(True, f"fresh install of {target}")
    if not gosemver.is_valid(target):
        return PathVerdict(False, f"failed to upgrade since upgrading version {target} is not valid")
    try:
        target_major, target_minor = _major_minor(target)
    except _ParseError as e:
        return PathVerdict(False, f"failed to parse upgrading {target} major/minor version: {e}")
    try:
        current_major, current_minor = _major_minor(current)
        if not gosemver.is_valid(current):
            raise _ParseError(
                f"{_go_quote(current)} is not a valid semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE])"
            )
    except _ParseError as e:
        return PathVerdict(False, f"failed to parse current {current} major/minor version: {e}")

    major_order = gosemver.compare(gosemver.major(current), gosemver.major(target))
    if major_order > 0:
        return _unsupported(f"downgrading from {current} to {target} for major version")
    if major_order < 0:
        if target_major - current_major > 1:
            return _unsupported(f"upgrading from {current} to {target} for major version")
        if current_minor < MIN_MINOR_FOR_MAJOR_UPGRADE:
            return _unsupported(
                f"upgrading major version with minor version under {MIN_MINOR_FOR_MAJOR_UPGRADE}"
            )
        return PathVerdict(True, f"major upgrade from {current} to {target} is supported")

    minor_step = target_minor - current_minor
    if minor_step > 1:
        exempt = two_minor_distro(distro, two_minor_distros) if minor_step == 2 else None
        if exempt is not None:
            return PathVerdict(
                True, f"two-minor upgrade from {current} to {target} is allowed for distro {exempt!r}"
            )
        return _unsupported(f"upgrading from {current} to {target} for minor version")
    if minor_step == 1:
        # Patch and prerelease are not looked at: v1.4.9 → v1.5.0-dev is a supported step.
        return PathVerdict(True, f"minor upgrade from {current} to {target} is supported")
    order = gosemver.compare(current, target)
    if order > 0:
        return _unsupported(f"downgrading from {current} to {target}")
    if order == 0:
        return PathVerdict(True, f"{target} is already the current version")
    return PathVerdict(True, f"upgrade from {current} to {target} within minor {target_minor} is supported")
