"""Go x/mod/semver semantics of `corral_upgradepath.gosemver`: validity, ordering, Major.

Besides the tables, a hypothesis test compares against `_GoOracle`, a direct transcription of the
Go algorithm (string scanning, no `semver` package), so the `semver`-based implementation is checked
against an independent one on generated version strings.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral_upgradepath import gosemver

VALID = [
    "v0.0.0",
    "v1",
    "v1.2",
    "v1.2.3",
    "v1.11.0",
    "v1.5.0-rc1",
    "v1.5.0-dev",
    "v1.5.0-rc.1.2",
    "v1.5.0-0",
    "v1.5.0-x-y-z.--",
    "v1.5.0+build",
    "v1.5.0+0001",
    "v1.5.0-rc1+build.5",
    "v123456789012345678901234567890.0.0",
]
INVALID = [
    "",
    "v",
    "1.5.0",
    "V1.5.0",
    "v1.",
    "v1.2.",
    "v1.2.3.4",
    "v01.2.3",
    "v1.02.3",
    "v1.2.03",
    "v1-rc1",
    "v1.2-rc1",
    "v1.2+build",
    "v1.2.3-",
    "v1.2.3+",
    "v1.2.3-01",
    "v1.2.3-rc..1",
    "v1.2.3-rc_1",
    "v1.2.3\n",
    " v1.2.3",
    "v1.2.3 ",
    "v1.٢.3",
    "master-head",
    "v1.12.0-invalid+",
]


@pytest.mark.parametrize("version", VALID)
def test_valid(version: str) -> None:
    assert gosemver.is_valid(version)


@pytest.mark.parametrize("version", INVALID)
def test_invalid(version: str) -> None:
    assert not gosemver.is_valid(version)


@pytest.mark.parametrize(
    ("lower", "higher"),
    [
        ("v1.5.0-rc1", "v1.5.0"),
        ("v1.5.0-dev", "v1.5.0"),
        ("v1.5.0-rc1", "v1.5.0-rc3"),
        ("v1.5.0-rc1", "v1.5.0-rc10"),  # identifiers compare as ASCII
        ("v1.5.0-rc.2", "v1.5.0-rc.10"),  # numeric identifiers compare as numbers
        ("v1.5.0-1", "v1.5.0-a"),  # numeric below alphanumeric
        ("v1.5.0-a", "v1.5.0-a.b"),  # a prefix is lower
        ("v1.4.9", "v1.5.0-dev"),
        ("v1.9.0", "v1.10.0"),
        ("v1.2", "v1.2.1"),
        ("master-head", "v0.0.0"),  # invalid below every valid version
        ("1.31.0", "v1.4.0"),
    ],
)
def test_order(lower: str, higher: str) -> None:
    assert gosemver.compare(lower, higher) == -1
    assert gosemver.compare(higher, lower) == 1


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("v1", "v1.0.0"),
        ("v1.2", "v1.2.0"),
        ("v1.5.0+a", "v1.5.0+b"),  # build metadata ignored
        ("master-head", "also-invalid"),  # two invalid versions are equal
        ("", "1.2.3"),
    ],
)
def test_equal(a: str, b: str) -> None:
    assert gosemver.compare(a, b) == 0


@pytest.mark.parametrize(
    ("version", "major"), [("v1.5.0", "v1"), ("v2", "v2"), ("v0.1.0-rc1", "v0"), ("1.5.0", ""), ("", "")]
)
def test_major(version: str, major: str) -> None:
    assert gosemver.major(version) == major


class _GoOracle:
    """x/mod/semver's parse and Compare, transcribed as string scanning."""

    @staticmethod
    def _num(v: str) -> tuple[str, str] | None:
        i = 0
        while i < len(v) and "0" <= v[i] <= "9":
            i += 1
        if i == 0 or (v[0] == "0" and i != 1):
            return None
        return v[:i], v[i:]

    @staticmethod
    def _ident_ok(ident: str, numeric_leading_zero_bad: bool) -> bool:
        if not ident or any(not (c.isascii() and (c.isalnum() or c == "-")) for c in ident):
            return False
        return not (numeric_leading_zero_bad and ident.isdigit() and ident[0] == "0" and len(ident) > 1)

    @classmethod
    def parse(cls, v: str) -> tuple[str, str, str, str] | None:
        if not v.startswith("v"):
            return None
        parts: list[str] = []
        rest = v[1:]
        for position in range(3):
            got = cls._num(rest)
            if got is None:
                return None
            number, rest = got
            parts.append(number)
            if rest == "":
                return (*parts, *["0"] * (2 - position), "")  # type: ignore[return-value]
            if position < 2:
                if rest[0] != ".":
                    return None
                rest = rest[1:]
        prerelease = ""
        if rest.startswith("-"):
            end = rest.find("+")
            prerelease, rest = (rest, "") if end < 0 else (rest[:end], rest[end:])
            if not all(cls._ident_ok(i, True) for i in prerelease[1:].split(".")):
                return None
        if rest.startswith("+"):
            if not all(cls._ident_ok(i, False) for i in rest[1:].split(".")):
                return None
            rest = ""
        return (parts[0], parts[1], parts[2], prerelease) if rest == "" else None

    @staticmethod
    def _cmp_int(x: str, y: str) -> int:
        if x == y:
            return 0
        return -1 if (len(x), x) < (len(y), y) else 1

    @classmethod
    def _cmp_pre(cls, x: str, y: str) -> int:
        if x == y:
            return 0
        if x == "":
            return 1
        if y == "":
            return -1
        xs, ys = x[1:].split("."), y[1:].split(".")
        for dx, dy in zip(xs, ys, strict=False):
            if dx != dy:
                nx, ny = dx.isdigit(), dy.isdigit()
                if nx != ny:
                    return -1 if nx else 1
                if nx:
                    return cls._cmp_int(dx, dy)
                return -1 if dx < dy else 1
        return -1 if len(xs) < len(ys) else 1

    @classmethod
    def compare(cls, v: str, w: str) -> int:
        pv, pw = cls.parse(v), cls.parse(w)
        if pv is None and pw is None:
            return 0
        if pv is None:
            return -1
        if pw is None:
            return 1
        for a, b in zip(pv[:3], pw[:3], strict=True):
            if c := cls._cmp_int(a, b):
                return c
        return cls._cmp_pre(pv[3], pw[3])


_number = st.sampled_from(["0", "1", "2", "9", "10", "11", "30", "01", "123456789012345678901"])
_ident = st.sampled_from(["rc1", "rc3", "rc10", "dev", "0", "1", "2", "10", "01", "a-b", "", "x_y", "-"])
_version = st.builds(
    lambda v, major, minor, patch, pre, build: v + major + minor + patch + pre + build,
    st.sampled_from(["v", "v", "v", "", "V"]),
    _number,
    st.one_of(st.just(""), _number.map(lambda n: "." + n)),
    st.one_of(st.just(""), _number.map(lambda n: "." + n)),
    st.one_of(st.just(""), st.lists(_ident, min_size=1, max_size=3).map(lambda ids: "-" + ".".join(ids))),
    st.one_of(st.just(""), st.lists(_ident, min_size=1, max_size=2).map(lambda ids: "+" + ".".join(ids))),
)


@settings(max_examples=400, deadline=None)
@given(_version, _version)
def test_matches_go_algorithm(v: str, w: str) -> None:
    assert gosemver.is_valid(v) == (_GoOracle.parse(v) is not None), v
    assert gosemver.compare(v, w) == _GoOracle.compare(v, w), (v, w)


@given(_version, _version, _version)
def test_compare_is_a_total_preorder(a: str, b: str, c: str) -> None:
    assert gosemver.compare(a, b) == -gosemver.compare(b, a)
    if gosemver.compare(a, b) <= 0 and gosemver.compare(b, c) <= 0:
        assert gosemver.compare(a, c) <= 0
