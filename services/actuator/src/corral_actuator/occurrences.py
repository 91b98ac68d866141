"""A repeated Kubernetes Event is one Event counted again, as Kubernetes' own recorder does it.

Decision services name an Event after what it says (corral_decision.events), so the same report
about the same object asks to create the same Event again. The first time it is created; after
that the existing Event's `count` goes up by one and its `lastTimestamp` moves to the new
occurrence, instead of a second Event with the same text. The occurrence is the body's
`lastTimestamp` (whole seconds): an existing Event already at or past it has recorded this
occurrence (a redelivered command) or a later one, and is left alone.
"""

from __future__ import annotations

from typing import Any


def occurrence(body: dict[str, Any]) -> str:
    stamp = body.get("lastTimestamp") or body.get("firstTimestamp") or ""
    return stamp if isinstance(stamp, str) else ""


def repeat_patch(existing: dict[str, Any], body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The JSON Patch that counts `body`'s occurrence on `existing` (tested on its
    resourceVersion, so two repeats at once are both counted), or None when `existing` already
    records it. RFC 3339 timestamps in UTC (`…Z`) sort as strings."""
    new = occurrence(body)
    if not new or occurrence(existing) >= new:
        return None
    count = existing.get("count")
    count = count if isinstance(count, int) and count > 0 else 1
    version = existing.get("metadata", {}).get("resourceVersion", "")
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        {"op": "replace" if "count" in existing else "add", "path": "/count", "value": count + 1},
        {"op": "replace" if "lastTimestamp" in existing else "add", "path": "/lastTimestamp", "value": new},
    ]
