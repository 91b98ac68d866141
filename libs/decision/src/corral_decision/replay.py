"""`corral replay`: a service's own `Decider` run again over a recorded bus, on the recording's clock.

A decision is debugged after the fact by making it again. The decider (from the registry, with the
service's default configuration) gets the bundle's LH_OBJECTS events of the kinds it reads and its
service's LH_RESULTS, in bundle order, each at its stream time on a `SimulatedClock`, and the
runner's own decision loop (decision_loop.py) decides when to ask it, on that clock (simclock.py):
the timing of a replay is the live runner's, not a copy of it. Each line arrives at its stream
time, as if the live service had read it then; lines stored at one instant arrive together.
`debounce_s` overrides the service's setting (0: a pass after every line).

Nothing is decided before the decider is `ready` (its view complete), nor after the last line
but the pass owed to the last lines (the recording says nothing about later).

That timing is the live runner's, but its input is not: a live service takes in each message a
delivery delay after its stream time, so its passes may split a burst where the replay's do not.
Every command names the input its pass had taken in (decided_on.py), so when the recording holds
every command of the service whole (a `--follow` recording, or the bus's history), the replay
decides pass for pass instead: it takes in exactly the object events and results the live pass had
(the two streams merged as that pass saw them), at that pass's time, and decides then; nowhere
else. A pass that commanded nothing left no mark and is not made again, which changes nothing a
decider reads, as its passes are level-triggered. `--debounce`, a recording without the marks (an
older release), or one whose commands survive only as results, is replayed on the timing. Recorded commands
are never adopted: the replay makes its own, and they are compared with the recorded ones by id
(recording.py, command_diff.py).

With `explain` set to a target key (`Volume/ns/name`) the replay also keeps the decider's verdict on
that target (`Decider.explain`) after every line or decision that touched it (its events, its
recorded commands and their results), and after every other line that changed it. Everything here
is a function of the bundle: same bundle, same report.

With `since_ns` (`corral replay --since T`) every line is still replayed, so the view and the
decider's own state (expectations, back-offs) at T are what the recording built up to T, but only
the decisions of the window are compared: a command recorded or replayed before T is not, unless
the other side has it in the window (then it is the `same` decision taken a little earlier or
later). The explanation starts with the verdict as of T.

Recorded commands and results name the corral release that made them (`Corral-Version` header);
the report lists those that are not the release replaying them, since a decider's rules may have
changed in between.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from corral_bus import StreamMessage
from corral_decision.bundle import BadLine, Line, order_key
from corral_decision.command_diff import Difference, ReplayedCommand, compare
from corral_decision.decided_on import DECIDED_ON_HEADER, DecidedOn
from corral_decision.decider import Explanation, InvalidEvent, Runnable, target_key
from corral_decision.decision_loop import DecisionLoop
from corral_decision.events import is_event
from corral_decision.recording import Recording
from corral_decision.runner import EventDecoder
from corral_decision.service import DecisionService
from corral_decision.simclock import SimulatedClock, SimulatedTime
from corral_model import codec
from corral_model.codec import SchemaError
from corral_model.envelopes import Command, CommandResult, EventType
from corral_model.kinds import KINDS
from corral_model.subjects import (
    COMMANDS_PREFIX,
    COMMANDS_STREAM,
    OBJECTS_STREAM,
    RESULTS_PREFIX,
    RESULTS_STREAM,
    escape_token,
    subject_matches,
    unescape_token,
)
from corral_model.version import VERSION_HEADER, corral_version

_NS = 1_000_000_000


@dataclass(frozen=True)
class Verdict:
    """The decider's verdict on the explained target after one line (or decision)."""

    after: Line | None
    touched: bool
    """The line (or a command decided after it) is about the target itself."""
    explanation: Explanation | None
    """None: the target is not in the view."""
    commands: tuple[str, ...] = ()
    """Ids of commands on the target decided right then."""


@dataclass
class ReplayReport:
    service: str
    lines: int = 0
    objects: int = 0
    results: int = 0
    recorded_commands: int = 0
    bad_lines: list[BadLine] = field(default_factory=list)
    stopped_at: BadLine | None = None
    """A strict replay stopped reading at this line (and replayed what came before it)."""
    skipped: list[tuple[Line, str]] = field(default_factory=list)
    """Readable lines whose message the live service could not use either (it skips them too)."""
    recorded_versions: dict[str, int] = field(default_factory=dict)
    """Corral releases named by the recorded commands and results, and how many of them each made."""
    running_version: str = ""
    before_window: int = 0
    """Replayed decisions before `since` that were not compared."""
    limits: list[str] = field(default_factory=list)
    """What the recording cannot reproduce, said by whoever read it (corral_cli.events.history)."""
    cut_short: list[Line] = field(default_factory=list)
    """The first line of every object whose history the bundle holds only from the middle (its
    first event is no ADDED): LH_OBJECTS keeps the last few events per object, so a bundle dumped
    long after the fact (or from `--since`) starts such objects where the stream does, and the
    replay's view of them is missing what came before."""
    recorded_passes: int = 0
    """The live passes replayed one by one on their recorded input (0: replayed on the timing)."""
    replayed: list[ReplayedCommand] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return all(d.match == "same" for d in self.differences)


def _object_key(subject: str) -> str | None:
    """`Kind/ns/name` of an `lh.obj.<token>.<ns>.<name>` subject (None: a RESYNCED marker, or a
    kind corral does not model)."""
    parts = subject.split(".")
    if len(parts) != 5 or parts[4] == "_resync" or parts[2] not in KINDS:
        return None
    return target_key(KINDS[parts[2]].kind, unescape_token(parts[3]), unescape_token(parts[4]))


class Replay:
    """Feed lines in bundle order (`feed`), then `finish()` for the report."""

    def __init__(
        self,
        service: DecisionService[Any],
        *,
        until_ns: int | None = None,
        since_ns: int | None = None,
        explain: str | None = None,
        debounce_s: float | None = None,
        strict: bool = False,
        namespace: str | None = None,
    ) -> None:
        config = service.config()
        if namespace is not None:
            config = msgspec.structs.replace(config, namespace=namespace)
        if debounce_s is not None:
            config = msgspec.structs.replace(config, debounce_s=debounce_s)
        self.service = service
        self.clock = SimulatedClock()
        self.time = SimulatedTime(self.clock)
        self.decider: Runnable = service.new_decider(config, self.clock)
        self._on_timing_only = debounce_s is not None  # another debounce: the live passes do not apply
        self.loop = DecisionLoop(
            self.decider,
            self.time.timing,
            debounce_s=config.debounce_s,
            idle_batch=config.idle_batch,
            wake=asyncio.Event(),
            may_decide=lambda: self.decider.ready,
            decide=self._decide,
        )
        self.decode_event = EventDecoder(service)
        self.until_ns = until_ns
        self.explain = explain
        self.strict = strict
        self.since_ns = since_ns
        self.report = ReplayReport(service.name, running_version=corral_version())
        self._object_filters = service.object_filters(config.namespace)
        self._results = f"{RESULTS_PREFIX}.{escape_token(service.name)}."
        self._event_results = f"{self._results}event."  # results of Events: reports, not decisions
        self._commands = f"{COMMANDS_PREFIX}.{escape_token(service.name)}."
        self._events = f"{self._commands}event."
        self._recording = Recording()
        self._late_results: set[str] = set()  # named by results after `until`
        self._objects_seen: set[str] = set()  # subjects
        self._last: Line | None = None
        self._fed = False  # a line woke the loop since its last pass
        self._led = False  # the first decision after the view is ready has been made
        self._verdict: Explanation | None = None
        self._finished = False
        self._paced = False  # deciding at the recorded passes, not on the timing

    # --- input ------------------------------------------------------------------------------------

    def feed_all(self, lines: Iterable[Line | BadLine]) -> ReplayReport:
        """Read every line (up to the first unreadable one when strict), put them in bundle order
        and replay them. A dump is in that order already, but what `--follow` recorded is in the
        order it arrived, where a core-NATS command or a result can come before object events
        stored earlier; replayed so, a decision would be made after its own live effect."""
        readable: list[Line] = []
        for line in lines:
            if isinstance(line, BadLine):
                self.report.bad_lines.append(line)
                if self.strict:
                    self.report.stopped_at = line
                    break
            else:
                readable.append(line)
        readable.sort(key=lambda line: order_key(line.entry, line.time_ns))
        passes = None if self._on_timing_only else self._recorded_passes(readable)
        if passes is None:
            for line in readable:
                self.feed(line)
        else:
            self._feed_pass_by_pass(readable, passes)
        return self.finish()

    # --- the recorded passes ------------------------------------------------------------------------

    def _recorded_passes(self, readable: list[Line]) -> list[DecidedOn] | None:
        """The live passes that commanded something, in order, when the recording names the input
        of every command the service made (None: replay on the timing, the reason in `limits`)."""
        passes: set[DecidedOn] = set()
        marked: set[str] = set()
        unmarked = 0
        named: set[str] = set()  # command ids the service's results name
        for line in readable:
            entry = line.entry
            if entry.stream == COMMANDS_STREAM and entry.subject.startswith(self._commands):
                mark = DecidedOn.parse(entry.headers.get(DECIDED_ON_HEADER, ""))
                if mark is None:
                    # a start-up hook's Event (the gate's) is no pass's; a decider's command is
                    unmarked += not entry.subject.startswith(self._events)
                    continue
                passes.add(mark)
                with contextlib.suppress(SchemaError):
                    marked.add(codec.decode(entry.data, Command).id)
            elif (
                entry.stream == RESULTS_STREAM
                and entry.subject.startswith(self._results)
                and not entry.subject.startswith(self._event_results)
            ):
                with contextlib.suppress(SchemaError):
                    named.add(codec.decode(entry.data, CommandResult).command_id)
        if not passes and not named:
            return None  # nothing recorded: nothing to pace by
        why = None
        if unmarked or not passes:
            why = "commands that do not name the input they were decided on (an older release)"
        elif named - marked:
            why = f"commands held only as their results ({len(named - marked)})"
        ordered = sorted(passes)
        if why is None and any(a.results_seq > b.results_seq for a, b in itertools.pairwise(ordered)):
            why = "passes whose inputs are not in stream order"
        if why is not None:
            self.report.limits.append(
                f"replayed on the runner's timing, not pass by pass: the recording has {why}"
            )
            return None
        return ordered

    def _feed_pass_by_pass(self, readable: list[Line], passes: list[DecidedOn]) -> None:
        """Feed every line, deciding before the first line that a pass had not taken in."""
        self._paced = True
        self.report.recorded_passes = len(passes)
        objects_upto = [p.objects_seq for p in passes]
        results_upto = [p.results_seq for p in passes]
        index = {p: i for i, p in enumerate(passes)}
        placed: list[tuple[int, int, Line]] = []
        before = 0  # the pass the last input line came before
        for position, line in enumerate(readable):
            entry = line.entry
            if entry.stream == OBJECTS_STREAM and self._reads(entry.subject):
                before = bisect.bisect_left(objects_upto, entry.seq)
            elif entry.stream == RESULTS_STREAM and entry.subject.startswith(self._results):
                before = bisect.bisect_left(results_upto, entry.seq)
            elif entry.stream == COMMANDS_STREAM and entry.subject.startswith(self._commands):
                mark = DecidedOn.parse(entry.headers.get(DECIDED_ON_HEADER, ""))
                if mark is not None:  # recorded after the pass that made it
                    placed.append((index[mark] + 1, position, line))
                    continue
            placed.append((before, position, line))
        placed.sort(key=lambda p: (p[0], p[1]))
        decided = 0
        for before, _, line in placed:
            while decided < before:
                self._decide_recorded(passes[decided])
                decided += 1
            self.feed(line)
        for mark in passes[decided:]:
            self._decide_recorded(mark)

    def _reads(self, subject: str) -> bool:
        return any(subject_matches(f, subject) for f in self._object_filters)

    def _decide_recorded(self, mark: DecidedOn) -> None:
        """A recorded pass, at its time (never past `until`, and only on a view the live one had)."""
        if (self.until_ns is not None and mark.at * _NS > self.until_ns) or not self.decider.ready:
            return
        self.clock.advance_to(mark.at)
        self._pass()

    def feed(self, line: Line) -> None:
        """One readable line, lines in bundle order (as `feed_all` and a bus snapshot give them)."""
        report = self.report
        if self.until_ns is not None and line.time_ns > self.until_ns:
            self._after_until(line)  # results after `until` still confirm commands made before it
            return
        report.lines += 1
        stream, subject = line.entry.stream, line.entry.subject
        if stream == OBJECTS_STREAM and self._reads(subject):
            self._arrive(line)
            self._object(line)
            self._wake()
        elif (
            stream == RESULTS_STREAM
            and subject.startswith(self._results)
            and not subject.startswith(self._event_results)
        ):
            self._arrive(line)
            self._result(line)
            self._wake()
        elif (
            stream == COMMANDS_STREAM
            and subject.startswith(self._commands)
            and not subject.startswith(self._events)  # Events are reports, not decisions
        ):
            # What came due before the live command was stored is decided first (the decider's
            # input is unchanged by it), so an explanation shows decisions in recorded order.
            self.time.run_until(line.time_ns / _NS)
            self._command(line)

    def _after_until(self, line: Line) -> None:
        entry = line.entry
        if (
            entry.stream == RESULTS_STREAM
            and entry.subject.startswith(self._results)
            and not entry.subject.startswith(self._event_results)
        ):
            with contextlib.suppress(SchemaError):
                self._late_results.add(codec.decode(entry.data, CommandResult).command_id)

    def _object(self, line: Line) -> None:
        entry = line.entry
        message = StreamMessage(entry.subject, entry.data, entry.headers, entry.seq, bootstrap=False)
        try:
            event = self.decode_event(message)
            self.decider.apply(event)
        except (SchemaError, InvalidEvent) as e:
            self.report.skipped.append((line, str(e)))
            return
        self.report.objects += 1
        if entry.subject not in self._objects_seen:
            self._objects_seen.add(entry.subject)
            if event.type is not EventType.ADDED and event.type is not EventType.RESYNCED:
                self.report.cut_short.append(line)
        self._observe(line, _object_key(entry.subject))

    def _result(self, line: Line) -> None:
        try:
            result = codec.decode(line.entry.data, CommandResult)
        except SchemaError as e:
            self.report.skipped.append((line, str(e)))
            return
        self.report.results += 1
        self.decider.record_result(result)
        if self._decided_by_decider(result.target.kind):
            self._recording.result(line, result, after=self._last)
            self._made_by(line)
        target = result.target
        self._observe(line, target_key(target.kind, target.namespace, target.name))

    def _command(self, line: Line) -> None:
        try:
            command = codec.decode(line.entry.data, Command)
        except SchemaError as e:
            self.report.skipped.append((line, str(e)))
            return
        if not self._decided_by_decider(command.target.kind):
            return
        self.report.recorded_commands += 1
        self._recording.command(line, command, after=self._last)  # recorded, never adopted
        self._made_by(line)
        target = command.target
        self._observe(line, target_key(target.kind, target.namespace, target.name))

    def _made_by(self, line: Line) -> None:
        version = line.entry.headers.get(VERSION_HEADER)
        if version:
            versions = self.report.recorded_versions
            versions[version] = versions.get(version, 0) + 1

    def _decided_by_decider(self, kind: str) -> bool:
        """Only the kinds the service commands are its decider's: the service also publishes its
        start-up hooks' commands (the upgrade-path gate's Events), which no replay makes."""
        return self.service.command_token(kind) is not None

    # --- deciding as the runner does ------------------------------------------------------------------

    def _arrive(self, line: Line) -> None:
        """Let the runner's loop decide whatever came due before this line, then move to it."""
        self.time.run_until(line.time_ns / _NS)
        self._last = line

    def _wake(self) -> None:
        """The line is taken in: wake the loop, started as the live one is once the view is ready."""
        self._fed = True
        if self._paced:
            return  # decided at the recorded passes
        if self.time.started:
            self.loop.wake()
        elif self.decider.ready:
            self.loop.wake()
            self.time.start(self.loop.run(asyncio.Event()))

    async def _decide(self, stop: asyncio.Event) -> None:
        """One pass of the loop, as a leader makes it, keeping what it decides."""
        self._pass()

    def _pass(self) -> None:
        if not self._led:
            # The live leader looks at every target once before its first decision (takeover.py).
            self._led = True
            self.decider.reconsider_all()
        by_timer, self._fed = not self._fed, False
        commands = self.decider.decide()
        now = self.clock()
        made = [ReplayedCommand(c, self._last, by_timer, now) for c in commands if not is_event(c)]
        self.report.replayed.extend(made)
        if self.explain is not None:
            mine = tuple(m.command.id for m in made if m.key == self.explain)
            if mine:
                self._record_verdict(self._last, touched=True, commands=mine)

    # --- explain --------------------------------------------------------------------------------------

    def _observe(self, line: Line, key: str | None) -> None:
        if self.explain is None:
            return
        touched = key == self.explain
        verdict = self._current_verdict()
        if touched or verdict != self._verdict:
            self._record_verdict(line, touched=touched, verdict=verdict)

    def _current_verdict(self) -> Explanation | None:
        assert self.explain is not None
        found = self.decider.explain(self.explain)
        return found[0] if found else None

    def _record_verdict(
        self,
        line: Line | None,
        *,
        touched: bool,
        verdict: Explanation | None = None,
        commands: tuple[str, ...] = (),
    ) -> None:
        if verdict is None and commands:
            verdict = self._current_verdict()
        self._verdict = verdict
        self.report.verdicts.append(Verdict(line, touched, verdict, commands))

    # --- the end ------------------------------------------------------------------------------------

    def finish(self) -> ReplayReport:
        """Decide what the last lines are owed (never past `until`), then compare."""
        if not self._finished:
            self._finished = True
            self.time.settle(None if self.until_ns is None else self.until_ns / _NS)
            self.time.close()
            self._compare()
        return self.report

    def _compare(self) -> None:
        report, recorded = self.report, self._recording.commands
        if self.since_ns is None:
            report.differences = compare(report.replayed, recorded, confirm_only=self._late_results)
            return
        since = self.since_ns / _NS
        in_window = {id_: r for id_, r in recorded.items() if r.first.time_ns >= self.since_ns}
        earlier = {id_ for id_ in recorded if id_ not in in_window}
        replayed = [m for m in report.replayed if m.at >= since or m.command.id in in_window]
        report.before_window = len(report.replayed) - len(replayed)
        report.replayed = replayed
        report.differences = compare(replayed, in_window, confirm_only={*self._late_results, *earlier})

        def earlier_than_window(v: Verdict) -> bool:
            return v.after is not None and v.after.time_ns < since_ns

        since_ns = self.since_ns
        before = [v for v in report.verdicts if earlier_than_window(v)]
        report.verdicts = before[-1:] + [v for v in report.verdicts if not earlier_than_window(v)]
