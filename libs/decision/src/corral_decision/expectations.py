"""Expectations, kept once for every decision service: the commands a decider issued (or adopted
from another replica) that its view does not show yet, client-go's "expectations".

An expectation is issued with a command and counts against the decider's limits until one of:

* the view shows the change (the rules say so: `settle`; they know which field moves);
* a refusal comes back (precondition failed, rejected, error, or only a dry run): the target is
  freed and *held* - the same command is not sent again until the view holds a fresher object
  than the refused decision used (the target, or another object the rules judged it on, such as
  its node: `judged_rv`), or `retry_backoff` passes;
* no result and no visible effect for `command_ttl` (a lost message), or an `applied` result the
  view still does not show after `applied_ttl` (a lagging view): it expires.

What is tracked per target (`Track`) is three attributes, so a decider may keep them on its own
per-object records (engine-upgrade does, at 100 k volumes) or let the kit keep them (`TargetTrack`).
Deadlines and backoffs are timers (timers.py) on the target's key, handed back to the decider as
"look at this target again".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Generic, Protocol, TypeVar

import msgspec

from corral_decision.timers import Timers
from corral_decision.timing import Timing
from corral_model.envelopes import Command, CommandResult, Outcome, Target

K = TypeVar("K", bound=Hashable)


class Expectation(msgspec.Struct, gc=False):
    """One command out on a target. `basis` is the one fact of the target the command changes,
    as the decision read it (engine-upgrade: the spec.image it moves away from; im-restart: the
    uid of the pod it deletes), for rules that settle on that fact rather than on a version."""

    command_id: str
    target: Target
    decided_rv: int  # the target's resourceVersion the decision was based on
    issued_at: float
    deadline: float
    basis: str = ""
    reason: str = ""
    applied: bool = False
    judged_rv: int = 0
    """The freshest resourceVersion among the objects the decision read (kit.judged_version): a
    refusal holds until one of them moves past it, not only the target."""


class Track(Protocol):
    """What the kit keeps per target: the command out on it, and the hold a refusal left."""

    expectation: Expectation | None
    hold_rv: int  # after a refusal: not sent again until the view's rv is above this …
    hold_until: float  # … or until this time (the retry backoff)


class TargetTrack:
    """A `Track` the kit keeps itself, for deciders without per-object records of their own."""

    __slots__ = ("expectation", "hold_rv", "hold_until")

    def __init__(self) -> None:
        self.expectation: Expectation | None = None
        self.hold_rv = -2
        self.hold_until = 0.0


class Expectations(Generic[K]):
    """Issue, settle, refuse, expire and adopt expectations on tracks keyed by `K`."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.timers: Timers[K] = Timers()
        self.count = 0
        """Expectations out now (issued or adopted, not settled, refused or expired)."""

    def issue(
        self,
        track: Track,
        key: K,
        command: Command,
        decided_rv: int,
        now: float,
        basis: str = "",
        judged_rv: int = 0,
    ) -> Expectation:
        deadline = now + self.timing.command_ttl
        if track.expectation is None:
            self.count += 1
        track.expectation = expectation = Expectation(
            command.id, command.target, decided_rv, now, deadline, basis, command.reason, judged_rv=judged_rv
        )
        self.timers.at(deadline, key, expectation)
        return expectation

    def settle(self, track: Track) -> bool:
        """The view shows what the command was to do (or can no longer apply): it stops counting."""
        if track.expectation is None:
            return False
        track.expectation = None
        self.count -= 1
        return True

    def applied(self, track: Track, key: K, now: float) -> None:
        """The actuator applied it: it counts until the view shows it, or `applied_ttl`."""
        expectation = track.expectation
        if expectation is not None:
            expectation.applied = True
            expectation.deadline = now + self.timing.applied_ttl
            self.timers.at(expectation.deadline, key, expectation)

    def refused(self, track: Track, key: K, now: float) -> None:
        """Free the target, and hold the same command back until fresher state or the backoff."""
        expectation = track.expectation
        if expectation is None:
            return
        self.settle(track)
        track.hold_rv = max(expectation.decided_rv, expectation.judged_rv)
        track.hold_until = now + self.timing.retry_backoff
        self.timers.at(track.hold_until, key)

    def result(self, track: Track, key: K, result: CommandResult, now: float) -> bool:
        """Settle on a result of the command out on `track`; True when it freed the target (a
        refusal). A result of any other command (a late duplicate, a superseded one) is ignored."""
        expectation = track.expectation
        if expectation is None or expectation.command_id != result.command_id:
            return False
        if result.outcome is Outcome.APPLIED and not result.dry_run:
            self.applied(track, key, now)
            return False
        self.refused(track, key, now)
        return True

    @staticmethod
    def held(track: Track, rv: int, now: float) -> bool:
        """A refusal still holds the target: the view (`rv`: what the rules judge the target on) is
        no fresher than the refused decision and the backoff has not passed."""
        return rv <= track.hold_rv and now < track.hold_until

    def due(self, now: float, track_at: Callable[[K], Track | None]) -> Iterator[K]:
        """The keys whose timer came, each after expiring its expectation if its deadline passed.
        The deadline of an expectation already settled (or extended: applied) is no wake."""
        for key, token in self.timers.due(now):
            track = track_at(key)
            if isinstance(token, Expectation):
                if track is None or track.expectation is not token or token.deadline > now:
                    continue  # settled meanwhile, or applied (a later deadline stands)
                self.settle(track)  # a lost command, or a view lagging past applied_ttl
            elif track is not None:
                expectation = track.expectation
                if expectation is not None and expectation.deadline <= now:
                    self.settle(track)
            yield key

    def next_due(self, track_at: Callable[[K], Track | None]) -> float | None:
        """When the next timer that still matters comes (stale deadlines are dropped on the way)."""
        timers = self.timers
        while (first := timers.first()) is not None:
            due, key, token = first
            if isinstance(token, Expectation):
                track = track_at(key)
                if track is None or track.expectation is not token or token.deadline != due:
                    timers.drop_first()
                    continue
            return due
        return None
