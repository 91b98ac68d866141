"""The kinds the actuator may address: corral's KINDS table plus core/v1 Event.

Events are written (never watched), so they are not in the shared table the watcher lists from.
A command's target names its kind either by bus token (`volume`) or by Kubernetes kind (`Volume`);
both resolve here, the Longhorn kind winning where a name is shared (Longhorn `Node` vs core `Node`).
"""

from __future__ import annotations

from corral_model.kinds import CORRAL_GROUP, KINDS, LONGHORN_GROUP, KindInfo

EVENT = KindInfo(
    token="event", kind="Event", group="", version="v1", plural="events", namespaced=True, struct=dict
)

ALL_KINDS: dict[str, KindInfo] = {**KINDS, EVENT.token: EVENT}

_GROUP_PREFERENCE = {LONGHORN_GROUP: 0, CORRAL_GROUP: 1}
_BY_KIND: dict[str, KindInfo] = {}
for _info in sorted(ALL_KINDS.values(), key=lambda k: _GROUP_PREFERENCE.get(k.group, 2), reverse=True):
    _BY_KIND[_info.kind] = _info


def resolve_kind(kind: str) -> KindInfo | None:
    """The kind a target names, by token or by Kubernetes kind; None when the actuator knows no such kind."""
    return ALL_KINDS.get(kind) or _BY_KIND.get(kind)


__all__ = ["ALL_KINDS", "EVENT", "KindInfo", "resolve_kind"]
