"""The kit's half of every decider: it owns everything a rule does not decide, once.

`DeciderKit` implements what the runner, takeover, plan and replay drive (`corral_decision.Runnable`)
on top of a service's rules (`corral_decision.Decider`):

* expectations (expectations.py): issued with each command, settled by a result (applied: wait
  for the view; refused: free and hold), expired after their TTL, adopted from another replica;
* timers (timers.py): expectation deadlines, retry backoffs and the rules' own "ask me again at"
  (`ask_again`), each handed back to the rules as `look_again(key)` before they decide;
* per-target holds: after a refusal, `may_send` is false until fresher state (of the target, or
  of what the rules judged it on: `judged_version`) or the backoff.

What the rules supply: `apply` (fold an event into their view), `reconcile(now)` (the commands they
want now, each sent through `issue`), `look_again(key)`, how a target is keyed (`key_for`) and
where its track and resourceVersion live (`track_at`, `version_at`, `tracks`), whether another
replica's command can still apply (`may_adopt`) and `explain`. Compare controller-runtime's
Reconcile returning `RequeueAfter`: the framework owns the queue, the retries and the backoff.

`K` is what the rules key a target by: `(kind, namespace, name)` for most (base.py), a volume's
own record for engine-upgrade, which keeps its tracks on its records rather than in parallel dicts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from corral_decision.decider import Clock, Explanation, Pending
from corral_decision.expectations import Expectation, Expectations, Track
from corral_decision.timing import Timing
from corral_model.envelopes import Command, CommandResult, ObjectEvent, Outcome, Target

K = TypeVar("K", bound=Hashable)

RESOURCE_VERSION = "/metadata/resourceVersion"


def tested_version(command: Command) -> int:
    """The resourceVersion a command was decided on, where it tests one; 0 otherwise."""
    for precondition in command.preconditions:
        if precondition.path == RESOURCE_VERSION:
            try:
                return int(precondition.value)
            except (TypeError, ValueError):
                return 0
    return 0


class DeciderKit(Generic[K]):
    """Subclass it with the rules: override the hooks (the first section), never the protocol the
    runner drives (the last); the middle is what the rules call."""

    def __init__(self, clock: Clock, timing: Timing | None = None, service: str = "") -> None:
        self.clock = clock
        self.service = service
        """Adopt only this service's commands ("": any, for a decider that cannot be confused)."""
        self.expected: Expectations[K] = Expectations(timing or Timing())

    # --- the rules' hooks -------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        raise NotImplementedError

    def apply(self, event: ObjectEvent[Any]) -> None:
        raise NotImplementedError

    def reconcile(self, now: float) -> list[Command]:
        """The commands the rules want now, each already `issue`d (Events need no issue)."""
        raise NotImplementedError

    def look_again(self, key: K) -> None:
        """A timer on `key` came due, or its command was refused or expired: judge it again at the
        next `reconcile`."""

    def key_for(self, target: Target) -> K | None:
        """How the rules key a commanded target (None: not one they command)."""
        raise NotImplementedError

    def track_at(self, key: K, create: bool = False) -> Track | None:
        raise NotImplementedError

    def version_at(self, key: K) -> int | None:
        """The resourceVersion of the object keyed `key` in view (None: not in view)."""
        raise NotImplementedError

    def judged_version(self, key: K) -> int | None:
        """The freshest resourceVersion among the objects the rules judge `key`'s commands on: a
        refused command's hold ends once it moves past the refused decision's, so a refusal for a
        fact outside the target (its node NotReady) is judged again when that fact changes, not
        after the whole retry backoff. The default is the target's own."""
        return self.version_at(key)

    def tracks(self) -> Iterable[Track]:
        """Every track that may hold an expectation (scrapes, takeover and replay; not per event)."""
        raise NotImplementedError

    def may_adopt(self, command: Command) -> bool:
        """Can another replica's command still apply on this view? The default counts every one
        (conservative: it holds until its result or TTL)."""
        return True

    def adopted(self, key: K, expectation: Expectation, command: Command) -> None:
        """Another replica's command now counts here: what the rules derive from it (a slot)."""

    def explain(self, key: str | None = None) -> list[Explanation]:
        return []

    def reconsider_all(self) -> None:
        """Look at every target again at the next decision (a replica that just became leader)."""

    def idle_work(self, budget: int) -> int:
        return 0

    # --- for the rules ----------------------------------------------------------------------------

    def issue(self, command: Command, key: K, decided_rv: int | None = None, basis: str = "") -> Command:
        """Count `command` as in flight on `key` from now on; returns it as the rules must send it
        (a retry after a refusal or an expiry carries its attempt: `Expectations.stamp`)."""
        track = self.track_at(key, create=True)
        assert track is not None
        if decided_rv is None:
            decided_rv = self.version_at(key) or 0
        judged = self.judged_version(key) or 0
        command = self.expected.stamp(command)
        self.expected.issue(track, key, command, decided_rv, self.clock(), basis, judged)
        return command

    def settle(self, key: K) -> bool:
        """The view shows what the command out on `key` was to do: it no longer counts."""
        track = self.track_at(key)
        return track is not None and self.expected.settle(track)

    def settle_if_fresher(self, key: K, gone: bool = False) -> bool:
        """Settle the command out on `key` once the view holds a fresher object than it was decided
        on (it was preconditioned on what it read: it applied, or can no longer apply)."""
        track = self.track_at(key)
        expectation = track.expectation if track is not None else None
        if expectation is None:
            return False
        if gone or (self.version_at(key) or 0) > expectation.decided_rv:
            return self.expected.settle(track)  # type: ignore[arg-type]
        return False

    def in_flight(self, key: K) -> bool:
        track = self.track_at(key)
        return track is not None and track.expectation is not None

    def may_send(self, key: K, now: float) -> bool:
        """No command out on `key`, and no refusal holding it back."""
        track = self.track_at(key)
        if track is None:
            return True
        if track.expectation is not None:
            return False
        return not self.expected.held(track, self.judged_version(key) or 0, now)

    def ask_again(self, at: float, key: K) -> None:
        """Call `look_again(key)` and decide once `at` has come (controller-runtime's RequeueAfter)."""
        self.expected.timers.at(at, key)

    # --- the protocol the runner drives (Runnable); not to be overridden ---------------------------

    def decide(self) -> list[Command]:
        if not self.ready:
            return []
        now = self.clock()
        due = self.expected.timers.first_due()
        if due is not None and due <= now:
            for key in self.expected.due(now, self.track_at):
                self.look_again(key)
        return self.reconcile(now)

    def next_due(self) -> float | None:
        return self.expected.next_due(self.track_at)

    def record_result(self, result: CommandResult) -> None:
        key = self.key_for(result.target)
        track = self.track_at(key) if key is not None else None
        if key is None or track is None:
            return
        if self.expected.result(track, key, result, self.clock()):
            self.look_again(key)

    def adopt(self, command: Command, applied: CommandResult | None) -> bool:
        """Count another replica's command (or an earlier run's) as in flight here, while it can
        still apply on this view; with its `applied` result, until the view shows it."""
        if self.service and command.service != self.service:
            return False
        key = self.key_for(command.target)
        if key is not None and self.in_flight(key):
            self._sent_again(key, command)
            return False
        if key is None or not self.may_adopt(command):
            return False
        track = self.track_at(key, create=True)
        assert track is not None
        decided_rv = max(self.version_at(key) or 0, tested_version(command))
        now = self.clock()
        expectation = self.expected.issue(track, key, command, decided_rv, now)
        if applied is not None and applied.outcome is Outcome.APPLIED and not applied.dry_run:
            self.expected.applied(track, key, now)
        self.adopted(key, expectation, command)
        return True

    def _sent_again(self, key: K, command: Command) -> None:
        """The command out on `key`, sent again by another replica (same id: the same decision):
        that copy may reach the actuator until its own TTL, so it counts until then, not only until
        the first copy's deadline."""
        track = self.track_at(key)
        out = track.expectation if track is not None else None
        if out is None or out.command_id != command.id or out.applied:
            return
        deadline = self.clock() + self.expected.timing.command_ttl
        if deadline > out.deadline:
            out.deadline = deadline
            self.expected.timers.at(deadline, key, out)

    def observed_version(self, target: Target) -> int | None:
        key = self.key_for(target)
        return self.version_at(key) if key is not None else None

    def expectations(self) -> Iterator[Pending]:
        for track in self.tracks():
            out = track.expectation
            if out is not None:
                yield Pending(
                    command_id=out.command_id, target=out.target, issued_at=out.issued_at, applied=out.applied
                )
