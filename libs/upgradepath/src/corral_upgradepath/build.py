"""What this build is: its Longhorn version, the engine API range it supports, the two-minor distros.

Longhorn fills these in at build time (ldflags into `meta.Version`, `meta.TwoMinorUpgradeDistros`,
and the vendored engine `meta` constants). corral keeps them in one file, `build.toml`, shipped in
the package next to this module and read through `importlib.resources`, so an installed wheel (even
a zipped one) reads the same values as the source tree and a release pipeline changes one file.
The values are validated when read: a broken build file fails loudly at start-up, never later in
the middle of a decision.
"""

from __future__ import annotations

import functools
from importlib import resources

import msgspec

from corral_upgradepath import gosemver

BUILD_FILE = "build.toml"


class EngineAPIVersions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The engine API versions a build speaks: an engine in use must sit inside [min, current]."""

    cli_api_version: int
    cli_api_min_version: int
    controller_api_version: int
    controller_api_min_version: int

    def __post_init__(self) -> None:
        if not 0 <= self.cli_api_min_version <= self.cli_api_version:
            raise ValueError(
                f"cli API range [{self.cli_api_min_version}, {self.cli_api_version}] is not a range"
            )
        if not 0 <= self.controller_api_min_version <= self.controller_api_version:
            raise ValueError(
                f"controller API range [{self.controller_api_min_version}, "
                f"{self.controller_api_version}] is not a range"
            )


class BuildInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    version: str
    engine_api: EngineAPIVersions
    two_minor_upgrade_distros: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not gosemver.is_valid(self.version):
            raise ValueError(f"build version {self.version!r} is not a valid semantic version (vX.Y.Z)")


class BuildFileError(RuntimeError):
    """The packaged build file is missing or malformed: this build cannot decide anything."""


def parse_build_info(data: bytes | str) -> BuildInfo:
    try:
        return msgspec.toml.decode(data, type=BuildInfo)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise BuildFileError(f"invalid {BUILD_FILE}: {e}") from e


@functools.cache
def build_info() -> BuildInfo:
    """This build's metadata, read once from the packaged `build.toml`."""
    try:
        data = resources.files(__package__ or "corral_upgradepath").joinpath(BUILD_FILE).read_bytes()
    except OSError as e:
        raise BuildFileError(f"cannot read packaged {BUILD_FILE}: {e}") from e
    return parse_build_info(data)
