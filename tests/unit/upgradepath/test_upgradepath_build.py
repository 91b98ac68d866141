"""Build metadata: the packaged build.toml is the one source, and a broken one fails loudly."""

from __future__ import annotations

import pytest

from corral_upgradepath import build_info
from corral_upgradepath.build import BuildFileError, EngineAPIVersions, parse_build_info


def test_packaged_build_is_longhorn_v1_11_0() -> None:
    info = build_info()
    assert info.version == "v1.11.0"
    # longhorn-behaviour.md §1.1, row v1.11.0
    assert info.engine_api == EngineAPIVersions(
        cli_api_version=11, cli_api_min_version=8, controller_api_version=6, controller_api_min_version=4
    )
    assert info.two_minor_upgrade_distros == ()
    assert build_info() is info  # read once


GOOD = """
version = "v1.12.0-dev"
two_minor_upgrade_distros = ["rke2", "harvester"]
[engine_api]
cli_api_version = 12
cli_api_min_version = 8
controller_api_version = 6
controller_api_min_version = 4
"""


def test_parse_build_info() -> None:
    info = parse_build_info(GOOD)
    assert info.version == "v1.12.0-dev"
    assert info.two_minor_upgrade_distros == ("rke2", "harvester")


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        (GOOD.replace('"v1.12.0-dev"', '"1.12.0"'), "not a valid semantic version"),
        (GOOD.replace("cli_api_min_version = 8", "cli_api_min_version = 13"), "is not a range"),
        (GOOD.replace("controller_api_min_version = 4", "controller_api_min_version = -1"), "is not a range"),
        (GOOD.replace("cli_api_version = 12", 'cli_api_version = "12"'), "Expected `int`"),
        (GOOD + "\nsurprise = 1\n", "unknown field"),  # lands in [engine_api]
        ("surprise = 1\n" + GOOD, "unknown field"),
        ("version = ", "invalid build.toml"),
        (GOOD.replace('version = "v1.12.0-dev"', ""), "missing required field `version`"),
    ],
)
def test_broken_build_file_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(BuildFileError, match=r"invalid build\.toml") as raised:
        parse_build_info(text)
    assert complaint in str(raised.value)
