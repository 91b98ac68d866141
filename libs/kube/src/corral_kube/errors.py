"""Errors of listing and watching, shaped so a caller can tell "start over" from "try again".

A 410 Gone means the resourceVersion the caller holds was compacted away: only a fresh list
recovers. Any other failure (5xx, a cut connection, a stalled stream) is retried from the last
resourceVersion the caller saw.
"""

from __future__ import annotations


class KubeApiError(Exception):
    """The API server answered a list or watch with an error status."""

    def __init__(self, status: int, reason: str = "", message: str = "") -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}".strip())

    @property
    def gone(self) -> bool:
        return self.status == 410


class ResourceVersionGone(KubeApiError):
    """The watch's resourceVersion is older than the server's history: re-list."""

    def __init__(self, message: str = "") -> None:
        super().__init__(410, "Gone", message)


class WatchStalled(Exception):
    """No byte (not even a bookmark) arrived within the inactivity timeout."""
