"""Go `golang.org/x/mod/semver` semantics, on top of the `semver` package.

Longhorn compares versions with x/mod/semver, whose rules differ from plain SemVer 2.0 in ways that
decide upgrade paths, so the gate must reproduce them exactly:

* a leading `v` is required (`1.5.0` is invalid);
* `vMAJOR` and `vMAJOR.MINOR` are valid shorthands for `vMAJOR.0.0` / `vMAJOR.MINOR.0`, but a
  shorthand cannot carry a prerelease or build suffix (`v1.5-rc1` is invalid);
* a prerelease sorts below its release; build metadata is ignored when comparing;
* an invalid string sorts below every valid one, and two invalid strings compare equal.

`semver.Version` does the parsing of the full form and the precedence rules. What it does not do
the Go way is checked here first: the `v`, ASCII-only digits (Python's `\\d` also matches other
scripts' digits), and shorthands with suffixes (`semver` accepts `1.5-rc1` with
`optional_minor_and_patch`). Numbers are unbounded on both sides (Go compares digit strings), so
there is no overflow difference.
"""

from __future__ import annotations

import functools
import re

import semver

# A shorthand (major, or major.minor) without suffixes: the only short forms Go accepts.
_SHORTHAND = re.compile(r"v(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))?")


@functools.lru_cache(maxsize=1024)
def parse(version: str) -> semver.Version | None:
    """The version as a `semver.Version`, or None when Go's x/mod/semver would call it invalid."""
    if not version.startswith("v") or not version.isascii():
        return None
    body = version[1:]
    if _SHORTHAND.fullmatch(version):
        return semver.Version.parse(body, optional_minor_and_patch=True)
    try:
        # `Version.parse` anchors with `$`, which tolerates one trailing newline; Go does not.
        return None if body.endswith("\n") else semver.Version.parse(body)
    except ValueError:
        return None


def is_valid(version: str) -> bool:
    return parse(version) is not None


def compare(v: str, w: str) -> int:
    """-1, 0 or +1 as x/mod/semver's `Compare`: invalid < valid, invalid == invalid, build ignored."""
    pv, pw = parse(v), parse(w)
    if pv is None and pw is None:
        return 0
    if pv is None:
        return -1
    if pw is None:
        return 1
    # `Version.compare` follows SemVer precedence and ignores build metadata, as Go does.
    return pv.compare(pw)


def major(version: str) -> str:
    """x/mod/semver's `Major`: `vN` for a valid version, "" for an invalid one."""
    parsed = parse(version)
    return "" if parsed is None else f"v{parsed.major}"
