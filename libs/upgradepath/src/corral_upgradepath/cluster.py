"""The slice of the cluster the gate looks at: the version setting and the engine images.

Built from a snapshot file, from the API server (pre-upgrade job) or from the bus (services), and
then handed to the same pure decision.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from corral_model.longhorn import EngineImage, Setting

CURRENT_VERSION_SETTING = "current-longhorn-version"


class ClusterView(msgspec.Struct, frozen=True, kw_only=True):
    # The `current-longhorn-version` Setting; None when it does not exist (a fresh install).
    version_setting: Setting | None = None
    engine_images: tuple[EngineImage, ...] = ()

    @property
    def current_version(self) -> str:
        return "" if self.version_setting is None else self.version_setting.value


def cluster_view(settings: Iterable[Setting], engine_images: Iterable[EngineImage]) -> ClusterView:
    """Pick the version setting out of any settings; keep every engine image."""
    version = next((s for s in settings if s.metadata.name == CURRENT_VERSION_SETTING), None)
    return ClusterView(version_setting=version, engine_images=tuple(engine_images))
