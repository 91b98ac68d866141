"""The watcher's configuration: `CORRAL_<FIELD>` environment variables (see corral_runtime.config)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from corral_model.kinds import KINDS
from corral_runtime import ServiceConfig

DEFAULT_KINDS = tuple(KINDS)


class WatcherConfig(ServiceConfig, kw_only=True, frozen=True):
    kubeconfig: str = ""
    """Path of a kubeconfig; empty means $KUBECONFIG, then the in-cluster service account."""
    kinds: tuple[str, ...] = DEFAULT_KINDS
    """Bus tokens of the kinds to watch (corral_model.kinds.KINDS), comma-separated."""
    resync_period_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """Full re-list of every kind this often, whatever the watches say."""
    inactivity_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 90.0
    """A watch silent this long (no event, no bookmark) is presumed dead and re-opened."""
    watch_timeout_s: Annotated[int, msgspec.Meta(gt=0)] = 300
    page_size: Annotated[int, msgspec.Meta(ge=0)] = 500
    tombstone_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 24 * 3600.0
    publish_window: Annotated[int, msgspec.Meta(gt=0)] = 8192
    ack_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 2.0

    def __post_init__(self) -> None:
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"CORRAL_KINDS: unknown kinds {unknown}; known: {', '.join(KINDS)}")
        if not self.kinds:
            raise ValueError("CORRAL_KINDS: at least one kind must be watched")
