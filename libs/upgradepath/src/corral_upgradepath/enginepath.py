"""The engine path: can this build drive every engine image that volumes still use?

Rules and messages: longhorn-behaviour.md §2.2 step 4 (`checkEngineUpgradePath`). An engine image
with a non-zero reference count must speak a controller API and a CLI API inside this build's
[min, current] range; an unused image (refCount 0) is ignored however old it is.

Longhorn walks a Go map, so which image it names first is unspecified; here images are checked in
name order, so the same cluster always yields the same message.
"""

from __future__ import annotations

from collections.abc import Iterable

from corral_model.longhorn import EngineImage
from corral_upgradepath.build import EngineAPIVersions
from corral_upgradepath.versionpath import PathVerdict

PREFIX = "failed checking Engine upgrade path"


def _api_problem(in_use: int, supported: int, supported_min: int) -> str | None:
    if in_use > supported:
        return f"downgrading from {in_use} to {supported} is not supported"
    if in_use < supported_min:
        return f"found version {in_use} is below required minimal version {supported_min}"
    return None


def check_engine_path(engine_images: Iterable[EngineImage], supported: EngineAPIVersions) -> PathVerdict:
    in_use = sorted((ei for ei in engine_images if ei.status.ref_count != 0), key=lambda ei: ei.metadata.name)
    for ei in in_use:
        problem = _api_problem(
            ei.status.controller_api_version,
            supported.controller_api_version,
            supported.controller_api_min_version,
        )
        if problem is not None:
            return PathVerdict(
                False, f"{PREFIX}: incompatible Engine {ei.metadata.name} controller API version: {problem}"
            )
        problem = _api_problem(
            ei.status.cli_api_version, supported.cli_api_version, supported.cli_api_min_version
        )
        if problem is not None:
            return PathVerdict(
                False, f"{PREFIX}: incompatible Engine {ei.metadata.name} client API version: {problem}"
            )
    if not in_use:
        return PathVerdict(True, "no engine image is in use")
    return PathVerdict(True, f"all {len(in_use)} engine images in use are compatible")
