"""What `corral --version` prints: corral's own release and the Longhorn release this build stands in for.

An operator looking at a container needs both: the first says which corral code runs, the second
which Longhorn upgrade path its gate enforces (the packaged build.toml, as the hook Job uses it).
"""

from __future__ import annotations

from importlib import metadata

from corral_upgradepath.build import BuildFileError, build_info

DISTRIBUTION = "corral-cli"


def corral_version() -> str:
    """The installed corral-cli distribution's version ("unknown" outside an installed tree)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def version_text() -> str:
    try:
        longhorn = build_info().version
    except BuildFileError as error:
        longhorn = f"unknown ({error})"
    return f"corral {corral_version()} (Longhorn {longhorn})"
