"""Which corral made a message: commands and results carry it, so a replay can say when the code
that made a recorded decision is not the code replaying it (`corral replay`).

It travels as a header (`Corral-Version`), not in the payload: the payloads' schemas and the
command ids stay as they are, and a message from before the header simply has none.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata

VERSION_HEADER = "Corral-Version"
DISTRIBUTION = "corral-model"
"""Every corral package is released together; this one is installed wherever a message is made."""


@cache
def corral_version() -> str:
    """The installed corral release ("unknown" outside an installed tree)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"
