"""The engine-upgrade decider: events and results in, commands out. Pure: no I/O, injected clock.

It re-implements the auto-upgrade step of Longhorn's EngineImage controller (longhorn-behaviour.md
§1.2-1.3) as an incremental computation:

* `apply(event)` folds an ObjectEvent into the view and re-evaluates only the volumes it touched;
  when the rules change for everybody (a new default image, bootstrap) the re-evaluation is lazy,
  node by node, in the order slots are filled (slots.py);
* `decide()` fills the free slots of the owner nodes whose state changed, `limit - in flight`
  each, with candidates live upgrades first, then by (namespace, name) (pick_order.py), and
  returns the commands;
* the kit (corral_decision.kit) settles the expectation a command created on its result, expires
  it, adopts another replica's and runs the timers; the expectations live on the volumes' records.

In flight on an owner node = volumes the view shows upgrading (spec.image != status.currentImage,
grouped by status.ownerID as Longhorn does) + volumes we sent a command for that the view does not
reflect yet ("expectations"). So a lagging view can never push a node over the limit:

* a command counts from the moment `decide` returns it;
* an `applied` result keeps it counted until the view shows spec.image changed, or `applied_ttl`;
* a refusal (precondition-failed, not-found, rejected-by-policy, error) frees the slot; the volume
  is re-decided once the view holds fresher state than the decision used, or after `retry_backoff`;
* a command with no result and no visible effect for `command_ttl` is presumed lost and freed, so
  a lost message cannot wedge a node forever.

Deliberate deviations from longhorn-manager HEAD are listed in services/engine-upgrade/README.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from corral_decision.decider import Clock, Explanation
from corral_decision.expectations import Expectation
from corral_decision.kit import DeciderKit
from corral_decision.timing import Timing
from corral_engine_upgrade.announce import BLOCKING, Announcer
from corral_engine_upgrade.desk import Desk
from corral_engine_upgrade.eligibility import step_gate, volume_reason
from corral_engine_upgrade.pick_order import filed_at_rank
from corral_engine_upgrade.reasons import Reason
from corral_engine_upgrade.records import DEAD, MARKED, ROLLED_BACK, VolumeRecord
from corral_engine_upgrade.rollback import ROLLED_BACK_PATH, RollbackMode, Rollbacks, rollback_command
from corral_engine_upgrade.slots import Owners
from corral_engine_upgrade.stuck import StuckBounds, StuckWatch
from corral_engine_upgrade.view import NO_IMPACT, UNREADABLE, ClusterView, Impact
from corral_engine_upgrade.wave_guard import FAILING, WaveGuard, WaveGuardConfig
from corral_model.envelopes import Command, FieldValue, ObjectEvent, Target, Verb, command_id

__all__ = ["SERVICE", "DeciderConfig", "EngineUpgradeDecider", "Explanation"]

SERVICE = "engine-upgrade"
_PATCH = Verb.PATCH
_IN_PROGRESS = Reason.IN_PROGRESS
_COMMAND_PENDING = Reason.COMMAND_PENDING
_RETRY_BACKOFF = Reason.RETRY_BACKOFF
_BLOCKING = BLOCKING


class DeciderConfig(msgspec.Struct, frozen=True, kw_only=True):
    # The kit's expectation TTLs and retry backoff.
    timing: Timing = Timing()
    # How long a deleted object's resourceVersion is remembered to reject late, older events.
    tombstone_ttl: float = 600.0
    # corral's own per-node limit, in place of Longhorn's setting (beside a running longhorn-manager,
    # whose loop is off only while its setting is 0). None: the setting's value, as Longhorn.
    limit_override: int | None = None
    # Make Events on the volumes (started, completed, blocked: announce.py), taken by `decide()`.
    announce: bool = False
    # How long an upgrade may stay in flight before it is named stuck (stuck.py).
    stuck: StuckBounds = StuckBounds()
    # When a wave failing on too many volumes pauses (wave_guard.py).
    wave_guard: WaveGuardConfig = WaveGuardConfig()
    # When a stuck volume with a way out is rolled back (rollback.py).
    rollback: RollbackMode = RollbackMode.APPROVED


class EngineUpgradeDecider(DeciderKit[VolumeRecord]):
    """The engine-upgrade rules as a `corral_decision.Decider`, on the kit. Targets are keyed by
    their volume's record, which carries the kit's track (expectation, hold): no parallel tables
    at 100 k volumes."""

    def __init__(self, clock: Clock, config: DeciderConfig | None = None) -> None:
        self.config = config or DeciderConfig()
        super().__init__(clock, self.config.timing, SERVICE)
        self.view = ClusterView(
            tombstone_ttl=self.config.tombstone_ttl, limit_override=self.config.limit_override
        )
        self._clock = clock
        self._owners = Owners(sort_later=True)  # sorted at the first walk (slots.py)
        # Owner nodes whose slots or candidates changed (Owners.place adds to it as it goes).
        self._dirty: set[str] = self._owners.dirty
        self._bootstrapped = False
        self._fields = FieldValues()
        # The clock's reading for the call in progress (apply, decide, record_result…), read by
        # `_refresh` rather than passed down through the walk in slots.py on every volume.
        self._now = 0.0
        # The volumes' Events (started, completed, blocked), taken by the next `decide()`.
        self._announcer = Announcer(SERVICE, self.view)
        self._announce = self.config.announce
        self._enabled = False  # the limit is above 0 (as of the last limit change)
        # The upgrades in flight, timed; those past their bound named stuck (stuck.py).
        self._stuck = StuckWatch(SERVICE, self.config.stuck, hint=self._rollback_hint)
        self._in_flight = self._stuck.in_flight  # read on every volume event
        # The wave's failures and its pause (wave_guard.py).
        self._guard = WaveGuard(SERVICE, self.config.wave_guard)
        # The kit's key for the pause's mark on the default EngineImage (`_mark_wave`): a record of
        # no volume, which only carries that command's expectation and hold.
        self._wave_key = VolumeRecord(namespace="", name="")
        # The stuck volumes' way out (rollback.py): the rollbacks sent, their Events.
        self._rollbacks = Rollbacks(SERVICE, self.config.rollback)

    # --- input ------------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent[Any]) -> None:
        """Fold one event into the view. Raises view.InvalidEvent (nothing changed) for bad input."""
        now = self._now = self._clock()
        change = self.view.apply(event, now)
        if change is NO_IMPACT:  # the most frequent answer: a status update, a duplicate…
            return
        if isinstance(change, VolumeRecord):  # the next most frequent: one volume's facts changed
            # Time the upgrades in flight (stuck.py); most events of a wave are of one already timed.
            in_flight = self._in_flight
            if change.spec_image != change.current_image:
                if change not in in_flight:
                    self._time_flight(change, now)
                elif change.flags & MARKED:  # the operator's rollback approval may have come
                    self._consider_rollback(change, now)
            elif in_flight and change in in_flight:
                self._time_flight(change, now)
            if change.robustness != "healthy" and change.robustness in FAILING and self._guard.members:
                self._guard_failure(change, change.robustness)
            if self._bootstrapped:
                if (
                    change.spec_image != change.current_image
                    or (change.desk is not None and change.desk.announced)
                ) and self._announce:
                    self._announcer.images_moved(change, now)
                if not self._place_without_rules(change):
                    self._observe(change)
                return
            self._file_before_bootstrap(change, now)
            return
        else:
            impact = change
        for volume in impact.removed:
            self._forget(volume)
        for volume in impact.volumes:
            self._time_flight(volume, now)
        if not self._bootstrapped:
            self._before_bootstrap(impact)
            return
        if impact.everything:
            self._new_epoch()
            self._sync_wave()
            for volume, _ in list(self._stuck.stuck_volumes()):  # an old image deployed again
                self._consider_rollback(volume, now)
        epoch = self._owners.epoch
        for volume in impact.volumes:
            self._observe(volume)
        for volume in impact.touched:
            # Nothing the rules read changed. Only fresher state itself matters, to a volume
            # waiting for it after a refusal; and a volume not yet judged stays for its turn.
            if volume.hold_until > now and volume.epoch == epoch:
                self._refresh(volume)
        if impact.limit_changed:
            self._dirty.update(self._owners.names())
            enabled = self.view.limit > 0
            if enabled and not self._enabled and self._announce:
                # Volumes judged while the loop was off were not announced as blocked: judge
                # them again (lazily, as after a new default image) so that they are.
                self._new_epoch()
            self._enabled = enabled

    def _file_before_bootstrap(self, volume: VolumeRecord, now: float) -> None:
        """One volume's event while the view is incomplete: what the way through an Impact and
        `_before_bootstrap` does for it, without them (5% of a 100 k-volume bootstrap's decode and
        apply). A volume's event never completes the view: a RESYNCED marker does."""
        self._time_flight(volume, now)
        self._file_unjudged(volume)

    def _file_unjudged(self, volume: VolumeRecord) -> None:
        """File a volume under its owner node by its own facts, before any rule has judged it."""
        self._owners.place(volume, volume.owner if volume.holds_slot else None, None)
        self._owners.track(volume)

    def _before_bootstrap(self, impact: Impact) -> None:
        """Until every kind is listed the rules would judge a partial view: only count what is in
        flight, and start deciding once the view is complete."""
        for volume in impact.volumes:
            self._file_unjudged(volume)
        if self.view.complete:
            self._bootstrapped = True
            self._enabled = self.view.limit > 0
            self._new_epoch()
            self._sync_wave()

    def apply_all(self, events: Iterable[ObjectEvent[Any]]) -> None:
        for event in events:
            self.apply(event)

    def may_adopt(self, command: Command) -> bool:
        """Another replica's command (seen on LH_COMMANDS) counts as in flight, with the bookkeeping
        of our own: until the view reflects it, a refusal comes back, or `command_ttl` passes. So a
        new leader respects its predecessor's commands that are on their way. Not adopted when it
        cannot take a slot: not an engine upgrade of a volume in the view (deleted), already shown
        by the view (spec.image is the target: the volume counts as in flight by itself), or unable
        ever to apply (spec.image moved away from the image the command tests).

        Its other preconditions (state, owner node, robustness, currentImage) are deliberately not
        checked: they can hold again before the actuator reaches the command (a volume degraded a
        moment, then healthy), and a command that can still apply must hold a slot. One that will
        be refused holds it only until the refusal comes back."""
        target = command.target
        if command.verb is not Verb.PATCH or target.kind != "Volume":
            return False
        volume = self.view.volume(target.namespace, target.name)
        to_image = next((c.value for c in command.changes if c.path == "/spec/image"), None)
        if volume is None or not isinstance(to_image, str):
            return False
        tested_image = next((p.value for p in command.preconditions if p.path == "/spec/image"), None)
        if tested_image is None:
            return False  # not a change this decider makes (its commands always test spec.image)
        return tested_image == volume.spec_image and to_image != volume.spec_image

    def adopted(self, key: VolumeRecord, expectation: Expectation, command: Command) -> None:
        expectation.basis = key.spec_image
        self._owners.place(key, key.owner, None)

    # --- output -----------------------------------------------------------------------------------

    def reconcile(self, now: float) -> list[Command]:
        """Commands for every free slot on the owner nodes whose state changed since last time,
        then the volumes' Events made since the last call (announce.py)."""
        self._now = now
        commands = self._fill_slots(now) if self._dirty else []
        if self._announcer.outbox and self.config.announce:
            commands.extend(self._announcer.take())
        if self._stuck.outbox:
            commands.extend(self._stuck.take())
        if self._guard.outbox:
            commands.extend(self._guard.take())
        if self._rollbacks.outbox:
            commands.extend(self._rollbacks.take())
        return commands

    def look_again(self, key: VolumeRecord) -> None:
        """Its command was refused or expired, its backoff ended, or its upgrade's stuck bound
        came (stuck.py): judge it again. The wave's key: its pause's mark is due again."""
        if key is self._wave_key:
            self._mark_wave(self._clock())
        elif key.alive:
            now = self._now = self._clock()
            if self._stuck.in_flight:
                evidence = self._stuck.check(key, now, self._announce)
                if evidence:
                    self._guard_failure(key, f"stuck ({evidence})")
                self._consider_rollback(key, now)
            self._refresh(key)

    def _fill_slots(self, now: float) -> list[Command]:
        limit = self.view.limit
        if not self._bootstrapped or limit <= 0 or self._guard.paused(self.view.default_ei):
            # a limit change, and the wave's resume (`_sync_wave`), mark every owner node dirty again
            self._dirty.clear()
            return []
        dirty = self._dirty
        names = sorted(dirty) if len(dirty) > 1 else list(dirty)
        dirty.clear()
        owners = self._owners
        nodes = owners.nodes
        classify = self._refresh
        commands: list[Command] = []
        for name in names:
            node = nodes.get(name)
            if node is not None and node.in_flight < limit:
                for volume in owners.take(name, limit - node.in_flight, classify):
                    commands.append(self._issue(volume, now))
        return commands

    def reconsider_all(self) -> None:
        """Look at every owner node at the next `decide` (a replica that just became leader; its
        predecessor reported the volumes' transitions so far, so its own backlog is dropped)."""
        self._dirty.update(self._owners.names())
        self._announcer.outbox.clear()

    def catch_up(self, budget: int = 10_000) -> int:
        """Classify up to `budget` volumes not yet judged under the current rules (after a new
        default image they are judged lazily, as slots free up); for exact candidate metrics.
        Returns how many were classified: 0 means the view is fully classified."""
        self._now = self._clock()
        return self._owners.catch_up(budget, self._refresh)

    def uid_of(self, target: Target) -> str:
        """The uid of a Volume in view ("" if unknown): the kit puts it on Events about it."""
        record = self.view.volume(target.namespace, target.name) if target.kind == "Volume" else None
        return record.uid if record is not None else ""

    def explain(self, key: str | None = None) -> list[Explanation]:
        """For every volume (or the one `key` names), as of now: the first rule or gate that holds
        it back, `command-pending` once chosen. `group` is its owner node."""
        now = self._clock()
        view = self.view
        gate = step_gate(view)
        if key is None:
            volumes = sorted(view.volumes(), key=lambda v: (v.namespace, v.name))
        else:
            kind, _, rest = key.partition("/")
            namespace, _, name = rest.partition("/")
            one = view.volume(namespace, name) if kind == "Volume" else None
            volumes = [one] if one is not None else []
        paused = self._guard.paused(view.default_ei)
        out: list[Explanation] = []
        for volume in volumes:
            reason = volume_reason(volume, view, now)
            detail = self._stuck.stuck(volume) if reason is _IN_PROGRESS else ""
            if detail:  # named stuck (stuck.py): the slot it holds, and its way out (rollback.py)
                reason, detail = Reason.STUCK, self._stuck_detail(volume, detail)
            elif volume.flags & UNREADABLE:  # before any gate: only the operator can mend it
                reason, detail = Reason.UNREADABLE, view.unreadable_reason(volume)
            elif gate is not None:
                reason, detail = gate, reason or ""
            elif reason is Reason.ROLLED_BACK:
                detail = self._rolled_back_detail(volume)
            elif reason is None and paused:  # wave_guard.py: no new upgrade starts
                reason, detail = Reason.WAVE_PAUSED, paused
            elif reason is None:
                full = self._owners.in_flight(volume.owner) >= view.limit
                reason = Reason.NODE_LIMIT_REACHED if full else Reason.AWAITING_DECISION
            out.append(
                Explanation(
                    kind="Volume",
                    namespace=volume.namespace,
                    name=volume.name,
                    group=volume.owner,
                    reason=reason,
                    detail=detail,
                )
            )
        return out

    # --- state for runners and metrics -------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """The view is complete, so decisions are meaningful."""
        return self._bootstrapped

    def in_flight_by_node(self) -> dict[str, int]:
        return self._owners.in_flight_by_node()

    def stuck_by_node(self) -> dict[str, int]:
        """Upgrades named stuck per owner node (stuck.py): slots held past their bound."""
        return dict(self._stuck.stuck_by_node())

    def wave_paused(self) -> str:
        """Why the wave is paused (wave_guard.py), "" while it is not."""
        return self._guard.paused(self.view.default_ei)

    def wave_failures(self) -> dict[str, str]:
        """The volumes of the wave that failed or got stuck on its image, and how."""
        return {f"{v.namespace}/{v.name}": how for v, how in self._guard.failed.items()}

    def stuck_volumes(self) -> list[tuple[VolumeRecord, str]]:
        """Every volume named stuck, with its evidence."""
        return list(self._stuck.stuck_volumes())

    def candidates_by_node(self) -> dict[str, int]:
        """Known candidates per owner node (exact once `catch_up` returns 0)."""
        return self._owners.candidates_by_node()

    def unclassified(self) -> int:
        return self._owners.unclassified()

    def pending_commands(self) -> int:
        """Commands issued and not yet reflected or refused (O(volumes): for metric scrapes)."""
        return sum(1 for v in self.view.volumes() if v.expectation is not None)

    # --- the kit's keys: a volume's record is its key and its track ----------------------------------

    def key_for(self, target: Target) -> VolumeRecord | None:
        if target.kind == "Volume":
            return self.view.volume(target.namespace, target.name)
        return self._wave_key if target.kind == "EngineImage" else None  # the pause's mark

    def track_at(self, key: VolumeRecord, create: bool = False) -> VolumeRecord | None:
        return key if key.alive else None

    def version_at(self, key: VolumeRecord) -> int | None:
        if key is self._wave_key:
            ei = self.view.default_ei
            return ei.rv if ei is not None else 0
        return key.rv if key.alive else None

    def tracks(self) -> Iterator[VolumeRecord]:
        """O(volumes): for metric scrapes, takeover logs and replay, never per event."""
        return iter(self.view.volumes())

    def idle_work(self, budget: int) -> int:
        """Judge up to `budget` volumes not yet judged under the current rules; how many are left."""
        if budget:
            self.catch_up(budget)
        return self.unclassified()

    # --- internals ----------------------------------------------------------------------------------

    def _new_epoch(self) -> None:
        """The rules changed for every volume (bootstrap, a new default image): re-judge all of
        them, lazily and in order, as the owner nodes' slots are filled."""
        self._owners.new_epoch()
        self._dirty.update(self._owners.names())

    def _place_without_rules(self, volume: VolumeRecord) -> bool:
        """Place `volume` when its verdict follows from its images alone; True when done.

        An upgrade under way that holds its slot on its owner node keeps it (only currentImage or
        spec.image moving can end that), and a volume on the default image holds no slot and is no
        candidate (the upgrade that just completed frees its slot here). Most events of a wave are
        of such volumes (the new replicas of an upgrade under way, the actuator's patch landing,
        the upgrade completing, the old replicas deleted after it), so this spares them the rules.
        Clears an expectation the view now shows met, as `_refresh` does."""
        desk = volume.desk
        if desk is not None:
            expectation = desk.expectation
            if expectation is not None:
                if volume.spec_image == expectation.basis:
                    return False
                self.expected.settle(desk)  # observed (see _refresh); the desk is its track
            if desk.candidate_node is not None:
                return False
            slot_node = desk.slot_node
        else:
            slot_node = None
        owner = volume.owner
        if volume.member_of != owner or not filed_at_rank(volume):
            return False
        spec_image = volume.spec_image
        if spec_image != volume.current_image:
            return slot_node == owner
        if spec_image != self.view.default_image:
            return False
        if slot_node is not None:
            self._owners.place(volume, None, None)
            volume.tidy(self._now)
        return True

    def _observe(self, volume: VolumeRecord) -> None:
        """An event changed a fact of `volume` that the rules read.

        A volume not yet judged under the current rules that stays on its owner node is ahead of
        that node's cursor (slots.py): the walk judges it when it gets there, from the state it will
        then have, so judging it now would be wasted. Only the in-flight count is eager, so only
        whether it holds a slot follows the event. Any other volume (one that changed owner node or
        pick-order rank moves in the members, possibly behind the cursor) is judged again now."""
        if (
            volume.epoch == self._owners.epoch
            or volume.member_of != volume.owner
            or not filed_at_rank(volume)
        ):
            self._refresh(volume)
            return
        desk = volume.desk
        if desk is not None:
            expectation = desk.expectation
            if expectation is not None and volume.spec_image != expectation.basis:
                self.expected.settle(desk)  # observed (see _refresh)
        slot = volume.owner if volume.holds_slot else None
        if (desk.slot_node if desk is not None else None) != slot:
            # A volume holding a slot is no candidate (a queue entry from older rules would be
            # re-judged when reached anyway; dropping it keeps the candidate count exact).
            candidate = None if slot is not None or desk is None else desk.candidate_node
            self._owners.place(volume, slot, candidate)
            volume.tidy(self._now)

    def _refresh(self, volume: VolumeRecord, queue: bool = True) -> bool:
        """Re-evaluate one volume's rules (as of `self._now`) and move it between queue / slot /
        nothing.

        The walk in slots.py passes `queue=False` for the member it has reached: that member comes
        before everything left in its node's queue, so when it qualifies it is taken on the spot
        (True) rather than queued and popped again."""
        desk = volume.desk
        if desk is not None:
            expectation = desk.expectation
            if expectation is not None and volume.spec_image != expectation.basis:
                self.expected.settle(desk)  # the view now shows our change (or someone else's): observed
        reason = volume_reason(volume, self.view, self._now)
        if ((desk is not None and desk.announced) or reason in _BLOCKING) and self._announce:
            self._announcer.judged(volume, reason, self._now)
        owners = self._owners
        volume.epoch = owners.epoch
        owner = volume.owner
        desk = volume.desk  # the announcer may have made it
        if reason is None:
            if (
                not queue
                and volume.member_of == owner
                and (desk is None or (desk.slot_node is None and desk.candidate_node is None))
                and filed_at_rank(volume)
            ):
                return True  # the walk takes it: nothing to place
            slot, candidate = None, owner
        elif reason is _IN_PROGRESS or reason is _COMMAND_PENDING:  # it holds a slot
            slot, candidate = owner, None
        else:
            if reason is _RETRY_BACKOFF:
                self.ask_again(volume.hold_until, volume)
            slot = candidate = None
        if desk is None:
            if slot is not None or candidate is not None:
                owners.place(volume, slot, candidate)
        elif desk.slot_node != slot or desk.candidate_node != candidate:
            owners.place(volume, slot, candidate)
        if volume.member_of != owner or not filed_at_rank(volume):
            owners.track(volume)
        if volume.desk is not None:
            volume.tidy(self._now)
        return False

    def _time_flight(self, volume: VolumeRecord, now: float) -> None:
        """Time an upgrade the view shows in flight (a wake at its stuck bound), or stop timing one
        that ended (stuck.py)."""
        if volume.spec_image != volume.current_image and not volume.flags & DEAD:  # alive
            due = self._stuck.started(volume, now)
            if due is not None:
                self.ask_again(due, volume)
                self._guard.joined(volume)
        else:
            self._stuck.ended(volume)
            if self._rollbacks.sent:  # our rollback, now in view: say it (rollback.py)
                self._rollbacks.ended(volume, now, self._announce)

    def _stuck_detail(self, volume: VolumeRecord, evidence: str) -> str:
        """A stuck volume's explanation: the evidence, and its way out (rollback.py)."""
        hint = self._rollbacks.hint(volume, self.view)
        return f"{evidence}; {hint}" if hint else evidence

    def _rolled_back_detail(self, volume: VolumeRecord) -> str:
        image = volume.marks.rolled_back if volume.marks is not None else ""
        return (
            f"rolled back from {image} when its upgrade got stuck; held while it is the default"
            f" engine image (remove the annotation {ROLLED_BACK} to let it be upgraded again)"
        )

    def _rollback_hint(self, volume: VolumeRecord) -> str:
        """What the stuck Warning Event says of the volume's way out (rollback.py)."""
        return self._rollbacks.hint(volume, self.view)

    def _consider_rollback(self, volume: VolumeRecord, now: float) -> None:
        """Roll a stuck volume back when Longhorn has a way out and the mode or the operator says so
        (rollback.py); not while a command is out on it or a refusal holds it back."""
        evidence = self._stuck.stuck(volume)
        if (
            not evidence
            or volume.expectation is not None
            or self.expected.held(volume, volume.rv, now)
            or not self._rollbacks.wanted(volume, self.view)
        ):
            return
        command = rollback_command(SERVICE, volume, self._fields.tests(volume), self._rollbacks.how(), now)
        command = self._out(volume, command, volume.rv, now, basis=volume.spec_image)
        self._rollbacks.send(command, volume, evidence)

    def _out(self, track: VolumeRecord, command: Command, rv: int, now: float, basis: str = "") -> Command:
        """`command` counted in flight on `track` and returned as it must be sent: a retry after a
        refusal or an expiry as its next attempt, under an id of its own (Expectations.stamp)."""
        command = self.expected.stamp(command)
        desk = track.desk  # the record's track lives on its desk (desk.py): hand that over directly
        if desk is None:
            desk = track.desk = Desk()
        self.expected.issue(desk, track, command, rv, now, basis=basis)
        return command

    def _guard_failure(self, volume: VolumeRecord, how: str) -> None:
        """A volume of the wave went wrong (degraded, faulted, stuck): the guard may pause it."""
        if self._guard.failure(volume, how, self.view.default_ei, self._now):
            self._mark_wave(self._now)

    def _mark_wave(self, now: float) -> None:
        """Write the pause on the default EngineImage until the view shows it (wave_guard.py): one
        mark out at a time, as a kit expectation, so a refused one is sent again after its backoff
        (or fresher state) and a lost one at its TTL; settled once shown, resumed or a new wave."""
        key, ei = self._wave_key, self.view.default_ei
        if self._guard.shown(ei):
            self.expected.settle(key)
            return
        if ei is None or key.expectation is not None or self.expected.held(key, ei.rv, now):
            return
        self._guard.outbox.append(self._out(key, self._guard.mark(ei, now), ei.rv, now))

    def _sync_wave(self) -> None:
        """After a rules change: a new default image starts a new wave (with the upgrades already in
        flight to it); a resume on the default EngineImage lets the owner nodes fill again."""
        guard = self._guard
        if self.view.default_image != guard.image:
            guard.new_wave(self.view.default_image)
            for volume in self._stuck.in_flight:
                guard.joined(volume)
        if guard.resumed(self.view.default_ei):
            self._dirty.update(self._owners.names())
        if guard.pending or self._wave_key.expectation is not None:
            self._mark_wave(self._now)

    def _forget(self, volume: VolumeRecord) -> None:
        self._stuck.ended(volume)
        self._rollbacks.sent.pop(volume, None)
        self._guard.forget(volume)
        self.expected.settle(volume)
        self._owners.place(volume, None, None)
        self._owners.track(volume)
        volume.tidy(self._now)

    def _issue(self, volume: VolumeRecord, now: float) -> Command:
        view = self.view
        default_image = view.default_image
        spec_image = volume.spec_image
        owner = volume.owner
        target = Target(kind="Volume", namespace=volume.namespace, name=volume.name)
        fields = self._fields
        changes = fields.changes(default_image)
        marks = volume.marks if volume.flags & MARKED else None  # MARKED: it has some (one test)
        if marks is not None and marks.rolled_back:  # its hold ends (rollback.py)
            changes = (*changes, FieldValue(path=ROLLED_BACK_PATH, value=None))
        tests = fields.tests(volume)
        live = volume.state == "attached"
        id_ = command_id(SERVICE, _PATCH, target, changes, tests)
        command = Command(
            id=id_,
            service=SERVICE,
            verb=_PATCH,
            target=target,
            changes=changes,
            preconditions=tests,
            reason=(
                f"{'live' if live else 'offline'} engine upgrade {spec_image} -> {default_image}"
                f" (owner node {owner or '-'}, per-node limit {view.limit})"
            ),
            created_at=now,
        )
        # Settled once spec.image moves away from the image it was decided on (the basis).
        command = self._out(volume, command, volume.rv, now, basis=spec_image)
        # It was a candidate a moment ago (the walk took it): now it holds a slot on its owner
        # node. No rule needs re-checking.
        self._owners.place(volume, owner, None)
        return command


def preconditions(volume: VolumeRecord) -> tuple[FieldValue, ...]:
    """The volume fields the decision rested on that the actuator tests before patching.

    A stale decision fails (the image moved, the upgrade finished or rolled back, the volume
    attached/detached, changed owner node — which would break the per-node count — or, for a live
    upgrade, stopped being healthy); unrelated changes (size, labels, replica status…) pass.
    Optional fields Kubernetes omits when empty (isStandby, expansionRequired, the migration node)
    are not tested: a JSON Patch `test` on an absent path fails, and the volume controller gates
    a live upgrade again before it starts (§1.5).

    `metadata.generation` is tested too (where the view has one): a spec changed since (an operator
    rolling the image back) refuses the decision, and the decision taken again after such a change
    is a new command. Without it, the upgrade decided again after a rollback to the very image it
    left had the id of the first, applied one, and LH_COMMANDS dropped it as a duplicate: the slot
    stayed held and the node's whole wave halted (the explorer's engine-upgrade/rolled-back cells).
    """
    return FieldValues().tests(volume)


class FieldValues:
    """The FieldValues of the decider's commands, shared: they are frozen, and their values (engine
    images, states, owner node names) repeat across thousands of commands, so each (path, value)
    is built once instead of once per command. Each table is bounded: past `limit` entries it
    starts over (node names may churn over a long life; images and states never get near).

    (Whole precondition tuples and reason strings were cached too, once: a lookup in a table of
    thousands of tuple keys misses the CPU caches and cost more than building them.)"""

    def __init__(self, limit: int = 4096) -> None:
        self._limit = limit
        self._by_path: dict[str, dict[Any, FieldValue]] = {}
        self._spec_image = self._table("/spec/image")
        self._current_image = self._table("/status/currentImage")
        self._state = self._table("/status/state")
        self._owner = self._table("/status/ownerID")
        self._robustness = self._table("/status/robustness")
        self._changes_image = ""
        self._changes: tuple[FieldValue, ...] = ()

    def _table(self, path: str) -> dict[Any, FieldValue]:
        return self._by_path.setdefault(path, {})

    def field(self, path: str, value: Any) -> FieldValue:
        table = self._table(path)
        found = table.get(value)
        if found is None:
            if len(table) >= self._limit:
                table.clear()
            found = table[value] = FieldValue(path=path, value=value)
        return found

    def changes(self, default_image: str) -> tuple[FieldValue, ...]:
        """The one change every command makes: spec.image to the default image."""
        if default_image != self._changes_image or not self._changes:
            self._changes = (self.field("/spec/image", default_image),)
            self._changes_image = default_image
        return self._changes

    def tests(self, volume: VolumeRecord) -> tuple[FieldValue, ...]:
        """`preconditions(volume)`, from the shared FieldValues (the generation is the volume's own)."""
        tests = self._facts(volume)
        if volume.generation:
            return (*tests, FieldValue(path="/metadata/generation", value=volume.generation))
        return tests

    def _facts(self, volume: VolumeRecord) -> tuple[FieldValue, ...]:
        state = volume.state
        owner = volume.owner
        spec_image = self._spec_image.get(volume.spec_image) or self.field("/spec/image", volume.spec_image)
        current_image = self._current_image.get(volume.current_image) or self.field(
            "/status/currentImage", volume.current_image
        )
        state_test = self._state.get(state) or self.field("/status/state", state)
        if state == "attached":
            robustness = self._robustness.get(volume.robustness) or self.field(
                "/status/robustness", volume.robustness
            )
            if owner:
                owner_test = self._owner.get(owner) or self.field("/status/ownerID", owner)
                return (spec_image, current_image, state_test, owner_test, robustness)
            return (spec_image, current_image, state_test, robustness)
        if owner:
            owner_test = self._owner.get(owner) or self.field("/status/ownerID", owner)
            return (spec_image, current_image, state_test, owner_test)
        return (spec_image, current_image, state_test)
