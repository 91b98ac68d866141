"""The restarts im-restart started, per instance manager (its commands' expectations are the kit's)."""

from __future__ import annotations


class Restart:
    """A settings restart under way: from the delete until the IM runs again on a new pod. It
    counts against `max_concurrent_im_restarts[_per_node]` until then, or until `deadline`."""

    __slots__ = ("deadline", "node", "old_pod_uid")

    def __init__(self, *, node: str, old_pod_uid: str, deadline: float) -> None:
        self.node = node
        self.old_pod_uid = old_pod_uid
        self.deadline = deadline
