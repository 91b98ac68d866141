"""Expectations, kept once for every decision service: the commands a decider issued (or adopted
from another replica) that its view does not show yet, client-go's "expectations".

An expectation is issued with a command and counts against the decider's limits until one of:

* the view shows the change (the rules say so: `settle`; they know which field moves);
* a refusal comes back (precondition failed, rejected, error, or only a dry run): the target is
  freed and *held* - the same command is not sent again until the view holds a fresher object
  than the refused decision used (the target, or another object the rules judged it on, such as
  its node: `judged_rv`), or `retry_backoff` passes (after an `error`, the API server's failure
  rather than a judgement, `error_backoff`, doubled per attempt);
* no result and no visible effect for `command_ttl` (a lost message), or an `applied` result the
  view still does not show after `applied_ttl` (a lagging view): it expires.

The same decision taken again after a refusal or an expiry is the next *attempt* (`stamp`): its id
is its own (corral_model.envelopes.as_attempt), or LH_COMMANDS' duplicate window (60 s) would drop
it as a repeat of the refused one, and the retry would not happen until the window passed. A
re-send of the same attempt keeps its id and is still dropped.

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
from corral_model.envelopes import Command, CommandResult, Outcome, Target, as_attempt, first_attempt_id

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
    attempt: int = 0
    first_id: str = ""
    """The id of the decision's first attempt ("": this is it)."""


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

    RETRIES_LIMIT = 50_000
    """Decisions remembered as refused or expired; past it the memory starts over (a retry then
    may repeat a refused id once, and waits out the duplicate window or its own expiry)."""

    def __init__(self, timing: Timing) -> None:
        self.timing = timing
        self.timers: Timers[K] = Timers()
        self.count = 0
        """Expectations out now (issued or adopted, not settled, refused or expired)."""
        self.retries: dict[str, int] = {}
        """Per decision (its first attempt's id) refused or expired: the attempt its retry is."""

    def stamp(self, command: Command) -> Command:
        """`command` as the attempt it is: its first, or the retry of a decision refused or expired
        (an id of its own, `as_attempt`). Call it on every command before `issue`."""
        if not self.retries:
            return command
        attempt = self.retries.pop(command.id, 0)
        return as_attempt(command, attempt) if attempt else command

    def _ended(self, expectation: Expectation) -> None:
        """Refused or expired: the same decision, taken again, is the next attempt."""
        if len(self.retries) >= self.RETRIES_LIMIT:
            self.retries.clear()
        self.retries[expectation.first_id or expectation.command_id] = expectation.attempt + 1

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
        if command.attempt:
            expectation.attempt = command.attempt
            expectation.first_id = first_attempt_id(command)
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

    def refused(self, track: Track, key: K, now: float, failed: bool = False) -> None:
        """Free the target, and hold the same command back until fresher state or the backoff
        (`failed`: the API server failed the write; the shorter `error_backoff` for that attempt)."""
        expectation = track.expectation
        if expectation is None:
            return
        self.settle(track)
        self._ended(expectation)
        timing = self.timing
        backoff = timing.retry_backoff
        if failed:
            backoff = min(backoff, timing.error_backoff * 2 ** min(expectation.attempt, 16))
        track.hold_rv = max(expectation.decided_rv, expectation.judged_rv)
        track.hold_until = now + backoff
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
        self.refused(track, key, now, failed=result.outcome is Outcome.ERROR)
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
                self._ended(token)
            elif track is not None:
                expectation = track.expectation
                if expectation is not None and expectation.deadline <= now:
                    self.settle(track)
                    self._ended(expectation)
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
