"""Why a setting is (not) applied: the `reason` of `explain()`, spelled once for the operator
(`corral plan setting-sync --explain`), the tests and the pending gauge."""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    APPLIED = "applied"
    """Every managed component carries the value (or nothing needed changing)."""
    NOT_DANGER_ZONE = "not-danger-zone"
    """Not a danger-zone setting: nothing to apply, `applied=true` (Longhorn's sync of it is not ours)."""
    CONSUMED_ELSEWHERE = "consumed-elsewhere"
    """A danger-zone setting the setting controller does nothing for (read by the IM controller or
    the schedulers): `applied=true`, as Longhorn's sync returns no error."""
    INVALID_VALUE = "invalid-value"
    """The value fails Longhorn's validation (a bypassed webhook, a corrupt object): never applied."""
    ATTACHED_VOLUMES = "attached-volumes"
    """Group A: something needs changing and some volume is not detached."""
    RWX_VOLUMES_ATTACHED = "rwx-volumes-attached"
    """Group B: something needs changing and a non-migratable RWX volume is not detached."""
    ENGINE_INSTANCES = "engine-instances"
    """Group D: something needs changing and an instance manager of that data engine runs engine
    instances (Longhorn checks instances, not volume state)."""
    NODE_NOT_READY = "node-not-ready"
    """The precondition holds, but every component still on the old value is an instance manager's
    pod on a Longhorn node that is not Ready: its delete waits for the node (im_node.py)."""
    APPLYING = "applying"
    """The precondition holds: commands are out (or queued) for the components still on the old value."""
    NOT_HANDLED = "not-handled"
    """A danger-zone setting no rule here covers (none today: groups A-D and the consumed-elsewhere
    ones are all routed); `status.applied` is then not written by corral."""
    VIEW_INCOMPLETE = "view-incomplete"
    """Not every kind has been listed yet: nothing is decided."""

    @property
    def pending(self) -> bool:
        """Counts in `corral_setting_pending`: a danger-zone value not (yet) applied."""
        return self in (
            Reason.INVALID_VALUE,
            Reason.ATTACHED_VOLUMES,
            Reason.RWX_VOLUMES_ATTACHED,
            Reason.ENGINE_INSTANCES,
            Reason.NODE_NOT_READY,
            Reason.APPLYING,
        )
