# ruff: noqa: E501  (the case table reads best one case per line)
"""The Longhorn version path (longhorn-behaviour.md §2.2 step 3), table-driven with exact messages.

The first table is T2.1 (`TestCheckUpgradePathSupported`) row by row; the second covers the rest of
the rules the spec states (pre-release and dev versions, patch steps, x.30+ major upgrades, the
distro exception, invalid versions) and the cases where corral deliberately differs from Go.
"""

from __future__ import annotations

import pytest

from corral_upgradepath.versionpath import check_version_path, two_minor_distro

ALLOWED = None


def _unsupported(what: str) -> str:
    return f"failed to upgrade since {what} is not supported"


# (case, current, target, distro, two-minor distros, expected message or ALLOWED)
T2_1 = [
    ("new install", "", "v1.5.0", "", (), ALLOWED),
    (
        "major downgrade",
        "v2.0.0",
        "v1.5.0",
        "",
        (),
        _unsupported("downgrading from v2.0.0 to v1.5.0 for major version"),
    ),
    (
        "two majors",
        "v1.5.0",
        "v3.0.0",
        "",
        (),
        _unsupported("upgrading from v1.5.0 to v3.0.0 for major version"),
    ),
    (
        "major with low minor",
        "v1.5.0",
        "v2.0.0",
        "",
        (),
        _unsupported("upgrading major version with minor version under 30"),
    ),
    ("major with upgradable minor", "v1.30.0", "v2.0.0", "", (), ALLOWED),
    (
        "two minors",
        "v1.3.0-dev",
        "v1.5.0",
        "",
        (),
        _unsupported("upgrading from v1.3.0-dev to v1.5.0 for minor version"),
    ),
    ("two minors, supported distro", "v1.3.0-dev", "v1.5.0", "Def", ("abc, def",), ALLOWED),
    (
        "two minors, unsupported distro",
        "v1.3.0-dev",
        "v1.5.0",
        "dev",
        ("abc, def",),
        _unsupported("upgrading from v1.3.0-dev to v1.5.0 for minor version"),
    ),
    (
        "three minors, supported distro",
        "v1.2.0-dev",
        "v1.5.0",
        "def",
        ("abc, def",),
        _unsupported("upgrading from v1.2.0-dev to v1.5.0 for minor version"),
    ),
    ("one minor", "v1.4.1", "v1.5.0", "", (), ALLOWED),
    (
        "minor downgrade",
        "v1.5.0-dev",
        "v1.4.0",
        "",
        (),
        _unsupported("downgrading from v1.5.0-dev to v1.4.0"),
    ),
    ("patch +1", "v1.5.0", "v1.5.1", "", (), ALLOWED),
    ("patch +1 again", "v1.5.2", "v1.5.3", "", (), ALLOWED),
    ("patch skip", "v1.5.0", "v1.5.9", "", (), ALLOWED),
    (
        "patch downgrade",
        "v1.5.1-dev",
        "v1.5.0",
        "",
        (),
        _unsupported("downgrading from v1.5.1-dev to v1.5.0"),
    ),
    ("pre-release up", "v1.5.0-rc1", "v1.5.0-rc3", "", (), ALLOWED),
]

MORE = [
    # The LEP table: x.y.0 -> x.y.*, x.y.* -> x.(y+1).*, and the blocked rows.
    ("x.y.0 to x.y.*", "v1.10.0", "v1.10.4", "", (), ALLOWED),
    ("x.y.* to x.(y+1).* (higher patch)", "v1.10.7", "v1.11.0", "", (), ALLOWED),
    ("x.(y-1).* to x.(y+1).*", "v1.9.3", "v1.11.0", "", (), _unsupported("upgrading from v1.9.3 to v1.11.0 for minor version")),
    ("x.(y-2).* to x.(y+1).*", "v1.8.2", "v1.11.0", "", (), _unsupported("upgrading from v1.8.2 to v1.11.0 for minor version")),
    ("x.y.* to x.(y-1).*", "v1.11.0", "v1.10.3", "", (), _unsupported("downgrading from v1.11.0 to v1.10.3")),
    ("x.y.* to x.y.(*-1)", "v1.11.2", "v1.11.1", "", (), _unsupported("downgrading from v1.11.2 to v1.11.1")),
    ("minor downgrade by two", "v1.11.0", "v1.9.0", "", (), _unsupported("downgrading from v1.11.0 to v1.9.0")),
    # Same version, pre-release and dev versions.
    ("same version", "v1.11.0", "v1.11.0", "", (), ALLOWED),
    ("same version, other build metadata", "v1.11.0+a", "v1.11.0+b", "", (), ALLOWED),
    ("prerelease to release", "v1.11.0-rc2", "v1.11.0", "", (), ALLOWED),
    ("dev to release", "v1.11.0-dev", "v1.11.0", "", (), ALLOWED),
    ("release to own prerelease is a downgrade", "v1.5.0", "v1.5.0-rc1", "", (), _unsupported("downgrading from v1.5.0 to v1.5.0-rc1")),
    ("rc down", "v1.5.0-rc3", "v1.5.0-rc1", "", (), _unsupported("downgrading from v1.5.0-rc3 to v1.5.0-rc1")),
    ("minor step ignores patch and prerelease", "v1.4.9", "v1.5.0-dev", "", (), ALLOWED),
    ("minor step from a dev build", "v1.10.0-dev", "v1.11.0", "", (), ALLOWED),
    ("first install of a dev build", "", "v1.12.0-dev", "", (), ALLOWED),
    ("first install with any target", "", "not-a-version", "", (), ALLOWED),
    # Major upgrades from x.30+.
    ("major from x.31", "v1.31.4", "v2.0.0", "", (), ALLOWED),
    ("major from x.30 to a later minor", "v1.30.0", "v2.3.0", "", (), ALLOWED),
    ("major from x.29", "v1.29.9", "v2.0.0", "", (), _unsupported("upgrading major version with minor version under 30")),
    ("two majors from x.30", "v1.30.0", "v3.0.0", "", (), _unsupported("upgrading from v1.30.0 to v3.0.0 for major version")),
    ("major downgrade from x.30", "v2.0.0", "v1.30.0", "", (), _unsupported("downgrading from v2.0.0 to v1.30.0 for major version")),
    # The distro exception: exactly two minors, trimmed and case-insensitive on both sides.
    ("distro, whitespace and case", "v1.9.3", "v1.11.0", "  SUSE-Edge ", (" rke2 ", "suse-edge"), ALLOWED),
    ("distro from one comma list", "v1.9.3", "v1.11.0", "rke2", ("harvester, RKE2 ,k3s",), ALLOWED),
    ("distro not listed", "v1.9.3", "v1.11.0", "k3s", ("rke2",), _unsupported("upgrading from v1.9.3 to v1.11.0 for minor version")),
    ("blank distro never matches", "v1.9.3", "v1.11.0", "  ", ("", " "), _unsupported("upgrading from v1.9.3 to v1.11.0 for minor version")),
    ("distro does not allow three minors", "v1.8.0", "v1.11.0", "rke2", ("rke2",), _unsupported("upgrading from v1.8.0 to v1.11.0 for minor version")),
    ("distro does not allow downgrades", "v1.11.0", "v1.9.0", "rke2", ("rke2",), _unsupported("downgrading from v1.11.0 to v1.9.0")),
    # Invalid target and invalid current versions.
    ("invalid target", "v1.10.0", "1.11.0", "", (), "failed to upgrade since upgrading version 1.11.0 is not valid"),
    ("target without minor", "v1.10.0", "v2", "", (), 'failed to parse upgrading v2 major/minor version: no minor version in "v2"'),
    ("master-head", "master-head", "v1.11.0", "", (), 'failed to parse current master-head major/minor version: strconv.Atoi: parsing "master-head": invalid syntax'),
    ("v1 without minor", "v1", "v1.11.0", "", (), 'failed to parse current v1 major/minor version: no minor version in "v1"'),
    ("v without digits", "v", "v1.11.0", "", (), 'failed to parse current v major/minor version: strconv.Atoi: parsing "": invalid syntax'),
    ("minor not a number", "v1.x.0", "v1.11.0", "", (), 'failed to parse current v1.x.0 major/minor version: strconv.Atoi: parsing "x": invalid syntax'),
    ("huge major", "v99999999999999999999.0.0", "v1.11.0", "", (), 'failed to parse current v99999999999999999999.0.0 major/minor version: strconv.Atoi: parsing "99999999999999999999": value out of range'),
    # Go would take these through the major-upgrade branch (semver.Major("") < "v1") and let the
    # first one through; corral refuses them as unparsable.
    ("missing v, minor >= 30", "1.31.0", "v1.11.0", "", (), 'failed to parse current 1.31.0 major/minor version: "1.31.0" is not a valid semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE])'),
    ("leading zero", "v1.05.0", "v1.11.0", "", (), 'failed to parse current v1.05.0 major/minor version: "v1.05.0" is not a valid semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE])'),
    ("trailing space", "v1.10.0 ", "v1.11.0", "", (), 'failed to parse current v1.10.0  major/minor version: "v1.10.0 " is not a valid semantic version (vMAJOR.MINOR.PATCH[-PRERELEASE])'),
    ("valid shorthand current", "v1.10", "v1.11.0", "", (), ALLOWED),
]  # fmt: skip


@pytest.mark.parametrize(
    ("current", "target", "distro", "distros", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in T2_1 + MORE],
)
def test_version_path(
    current: str, target: str, distro: str, distros: tuple[str, ...], expected: str | None
) -> None:
    verdict = check_version_path(current, target, distro=distro, two_minor_distros=distros)
    if expected is ALLOWED:
        assert verdict.allowed, verdict.message
        assert verdict.message  # an allowed verdict still says which rule allowed it
    else:
        assert not verdict.allowed
        assert verdict.message == expected


def test_distro_exception_is_named_in_the_note() -> None:
    verdict = check_version_path("v1.9.3", "v1.11.0", distro=" Def", two_minor_distros=("abc, def",))
    assert verdict.allowed
    assert "'def'" in verdict.message


@pytest.mark.parametrize(
    ("distro", "distros", "expected"),
    [
        ("Def", ("abc, def",), "def"),
        ("def", ("abc", " DEF "), "def"),
        ("", ("abc",), None),
        ("abc", (), None),
        ("ab", ("abc",), None),
    ],
)
def test_two_minor_distro(distro: str, distros: tuple[str, ...], expected: str | None) -> None:
    assert two_minor_distro(distro, distros) == expected
