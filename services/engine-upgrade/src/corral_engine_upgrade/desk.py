"""The rarely set part of a volume's record, kept apart from it and only while it is set.

At 100 k volumes nearly every record has no command out, no refusal holding it back, no slot, no
place in a candidate queue, nothing announced and no rollback annotation: eight fields of
defaults cost 64 bytes a record.
They live on a `Desk`, made the first time one of them is set and dropped again (`idle`) once all
of them are back to their defaults, so a record pays one field for them. The record still offers
them as attributes (records.VolumeRecord), which makes it the kit's `Track` as before; the per-event
paths read `record.desk` directly, since a property costs a Python call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from corral_decision.expectations import Expectation

if TYPE_CHECKING:
    from corral_engine_upgrade.records import Marks


class Desk(msgspec.Struct, gc=False):
    """What the decider (core.py, slots.py, announce.py) and the kit's track keep on one volume,
    and its rollback annotations (records.Marks)."""

    expectation: Expectation | None = None  # the kit's (corral_decision.expectations)
    hold_rv: int = -2  # after a refusal: not re-decided until rv > hold_rv …
    hold_until: float = 0.0  # … or until this time (a retry backoff)
    slot_node: str | None = None  # the owner node whose in-flight count includes this volume
    candidate_node: str | None = None  # the owner node whose candidate queue holds this volume
    queue_seq: int = 0  # which candidate-queue entry is the live one (older entries are stale)
    # What the volume's Events last said (announce.py): "" nothing, STARTED, or the blocking reason.
    announced: str = ""
    marks: Marks | None = None  # the rollback annotations (rollback.py)

    def idle(self, now: float) -> bool:
        """Nothing on it matters any more at `now` or later: no command out, no slot, no queue
        entry, nothing announced, and no hold (one whose backoff passed never holds again: the
        clock does not go back). queue_seq only tells a live queue entry while candidate_node is
        set."""
        return (
            self.expectation is None
            and self.slot_node is None
            and self.candidate_node is None
            and not self.announced
            and self.marks is None
            and self.hold_until <= now
        )
