"""Events in, per-owner-node figures out: the state of an engine-upgrade wave as an operator sees it
(`corral progress engine-upgrade`, and the `make run` demo).

The figures must never disagree with what the engine-upgrade service decides, so this model holds
the service's own `ClusterView` (same event ordering, tombstones, records) and judges every volume
with the service's own rules (`eligibility.volume_reason`, the `Reason` codes `corral plan
--explain` prints). Per volume, in this order:

* **in flight**: spec.image ≠ status.currentImage, counted on status.ownerID (the spec's
  In-flight(n), whatever image it is moving to);
* **done**: on the default image;
* **blocked**: a global gate (no default image, the image missing or unusable, the limit ≤ 0) or
  a per-volume rule holds it back, with that reason;
* **waiting**: eligible, not yet on the default image (its owner node may be at the limit).

An upgrade in flight past its bound is also named **stuck** (stuck.py), timed from when this model
first saw it in flight: `details()` lists each with the slot it holds on its owner node, its
evidence and its way out (rollback.py: "awaiting rollback approval" where Longhorn has one),
which `corral progress` prints under the figures; and a wave the wave guard paused
(wave_guard.py) says so in the heading, with the reason written on the default EngineImage.

It is incremental like the service: an event re-judges only the volumes it touched; a new default
image, an EngineImage change or a new limit re-judges every volume (rare events).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from corral_decision.progress import GroupFigures, Phase
from corral_engine_upgrade.eligibility import step_gate, volume_reason
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.records import VolumeRecord
from corral_engine_upgrade.rollback import Rollbacks
from corral_engine_upgrade.stuck import StuckBounds, StuckWatch
from corral_engine_upgrade.view import ClusterView, Impact
from corral_engine_upgrade.wave_guard import pause_id
from corral_model.envelopes import ObjectEvent

# Reasons that clear up on their own in moments (an image still deploying, a volume between
# attached and detached): while any volume shows one, a wave is not over yet.
SETTLING = frozenset(
    {Reason.DEFAULT_IMAGE_MISSING, Reason.DEFAULT_IMAGE_NOT_READY, Reason.NOT_ATTACHED_OR_DETACHED}
)


NO_OWNER = "-"  # the row of volumes without status.ownerID (Longhorn sets one on every volume)


def judge(volume: VolumeRecord, view: ClusterView, gate: Reason | None, now: float) -> tuple[Phase, str]:
    """One volume's phase and, when blocked, the reason `corral plan --explain` would give."""
    if volume.spec_image != volume.current_image:
        return Phase.IN_FLIGHT, ""
    if view.default_image and volume.spec_image == view.default_image:
        return Phase.DONE, ""
    if gate is not None:
        return Phase.BLOCKED, str(gate)
    reason = volume_reason(volume, view, now)
    if reason is None or reason in (Reason.RETRY_BACKOFF, Reason.COMMAND_PENDING):
        return Phase.WAITING, ""
    return Phase.BLOCKED, str(reason)


class ProgressModel:
    """Apply ObjectEvents (volume, replica, engineimage, node, setting); read per-node figures.
    A `corral_decision.progress.Progress`: what `corral progress engine-upgrade` draws."""

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        limit_override: int | None = None,
        stuck: StuckBounds | None = None,
    ) -> None:
        # Beside a running longhorn-manager the service's limit is corral's own (CORRAL_PER_NODE_LIMIT).
        self.view = ClusterView(limit_override=limit_override)
        self._clock = clock
        self._judged: dict[tuple[str, str], tuple[str, Phase, str]] = {}  # volume → owner, phase, reason
        self._rows: dict[str, GroupFigures] = {}
        self._sizes: Counter[str] = Counter()  # volumes per row, so an emptied row goes in O(1)
        self._gate: Reason | None = step_gate(self.view)
        self._stuck = StuckWatch("engine-upgrade", stuck)
        # A stuck volume's way out, as the service sees it in its default mode (rollback.py).
        self._rollbacks = Rollbacks("engine-upgrade")

    # --- input ------------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any]) -> None:
        """Fold one event in. Raises `corral_engine_upgrade.view.InvalidEvent` (nothing changed)
        for an event the view cannot read."""
        now = self._clock()
        change = self.view.apply(event, now)
        # The view hands back a lone changed volume as itself (no allocation on its hot path).
        impact = Impact(volumes=(change,)) if isinstance(change, VolumeRecord) else change
        for volume in impact.removed:
            self._unjudge((volume.namespace, volume.name))
            self._stuck.ended(volume)
        gate = step_gate(self.view)
        if impact.everything or impact.limit_changed or gate != self._gate:
            self._gate = gate
            for volume in self.view.volumes():
                self._judge(volume, now)
            return
        for volume in (*impact.volumes, *impact.touched):
            self._judge(volume, now)

    def apply_all(self, events: Iterable[ObjectEvent[Any]]) -> None:
        for event in events:
            self.apply(event)

    def _judge(self, volume: VolumeRecord, now: float) -> None:
        key = (volume.namespace, volume.name)
        owner = volume.owner or NO_OWNER
        phase, reason = judge(volume, self.view, self._gate, now)
        if phase is Phase.IN_FLIGHT:
            self._stuck.started(volume, now)
        else:
            self._stuck.ended(volume)
        held = self._judged.get(key)
        if held == (owner, phase, reason):
            return
        if held is not None:
            self._count(*held, -1)
        self._judged[key] = (owner, phase, reason)
        self._count(owner, phase, reason, 1)

    def _unjudge(self, key: tuple[str, str]) -> None:
        held = self._judged.pop(key, None)
        if held is not None:
            self._count(*held, -1)

    def _count(self, owner: str, phase: Phase, reason: str, delta: int) -> None:
        row = self._rows.get(owner)
        if row is None:
            row = self._rows[owner] = GroupFigures(owner)
        row.add(phase, reason, delta)
        size = self._sizes[owner] + delta
        if size:
            self._sizes[owner] = size
        else:  # a node row lives on only while it owns volumes or is a Longhorn node
            del self._sizes[owner]
            del self._rows[owner]

    # --- output -----------------------------------------------------------------------------------

    @property
    def complete(self) -> bool:
        """Every kind has been listed once (a RESYNCED marker each): the figures are the cluster's."""
        return self.view.complete

    @property
    def limit(self) -> int:
        return self.view.limit

    @property
    def default_image(self) -> str:
        return self.view.default_image

    @property
    def target(self) -> str:
        return self.view.default_image

    def heading(self) -> str:
        image = self.default_image or "(no default image)"
        heading = f"engine-upgrade: default image {image}, limit {self.limit} per owner node"
        paused = self.wave_paused()
        return f"{heading}; WAVE PAUSED ({paused})" if paused else heading

    def wave_paused(self) -> str:
        """The wave guard's pause on the default EngineImage, "" when the wave is not paused."""
        ei = self.view.default_ei
        return ei.paused if ei is not None and pause_id(ei) else ""

    def phase_of(self, namespace: str, name: str) -> tuple[Phase, str] | None:
        held = self._judged.get((namespace, name))
        return (held[1], held[2]) if held is not None else None

    def groups(self) -> list[GroupFigures]:
        """One row per Longhorn node and per owner node with volumes, sorted by name."""
        names = set(self.view.node_names()) | set(self._rows)
        return [self._rows[n].copy() if n in self._rows else GroupFigures(n) for n in sorted(names)]

    def total(self) -> GroupFigures:
        return GroupFigures.sum(self._rows.values())

    def details(self) -> list[str]:
        """One line per upgrade named stuck (stuck.py): the volume, the slot it holds, the evidence."""
        now = self._clock()
        for volume in list(self._stuck.in_flight):
            self._stuck.check(volume, now, announce=False)
        paused = ["wave paused: resume with `corral engine-upgrade resume`"] if self.wave_paused() else []
        return paused + [
            f"stuck: {volume.namespace}/{volume.name} holds a slot on {volume.owner or NO_OWNER}: {evidence}"
            + (f"; {hint}" if (hint := self._rollbacks.hint(volume, self.view)) else "")
            for volume, evidence in sorted(
                self._stuck.stuck_volumes(), key=lambda item: (item[0].owner, item[0].name)
            )
        ]

    def stuck_by_node(self) -> dict[str, int]:
        """Slots held by upgrades named stuck, per owner node (as of the last `details()`)."""
        return dict(self._stuck.stuck_by_node())

    def finished(self, target_image: str = "") -> bool:
        """The wave is over: the view is complete, nothing is in flight or waiting, no volume is
        held by a reason that clears up on its own, and (if given) `target_image` is the default."""
        if not self.complete or (target_image and self.view.default_image != target_image):
            return False
        total = self.total()
        if total.in_flight or total.waiting:
            return False
        return not any(reason in SETTLING for reason in total.blocked)
