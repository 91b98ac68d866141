"""What im-restart remembers about the commands it sent (its expectations) and the restarts they
started, per instance manager."""

from __future__ import annotations

from corral_model.envelopes import Target


class Sent:
    """One command out: a pod delete, or a SettingSynced patch. It counts until the view shows an
    object fresher than the one decided on (`decided_rv`: the pod's for a delete, the IM's for a
    patch; both are preconditioned on that resourceVersion, so a fresher object means the command
    applied or can no longer apply), a refusal comes back, or `deadline` passes."""

    __slots__ = (
        "applied",
        "command_id",
        "deadline",
        "decided_rv",
        "issued_at",
        "pod_uid",
        "reason",
        "target",
    )

    def __init__(
        self,
        *,
        command_id: str,
        target: Target,
        decided_rv: int,
        issued_at: float,
        deadline: float,
        reason: str,
        pod_uid: str = "",
        applied: bool = False,
    ) -> None:
        self.command_id = command_id
        self.target = target
        self.decided_rv = decided_rv
        self.issued_at = issued_at
        self.deadline = deadline
        self.reason = reason
        self.pod_uid = pod_uid
        self.applied = applied


class Restart:
    """A settings restart under way: from the delete until the IM runs again on a new pod. It
    counts against `max_concurrent_im_restarts[_per_node]` until then, or until `deadline`."""

    __slots__ = ("deadline", "node", "old_pod_uid")

    def __init__(self, *, node: str, old_pod_uid: str, deadline: float) -> None:
        self.node = node
        self.old_pod_uid = old_pod_uid
        self.deadline = deadline
