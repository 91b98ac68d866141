"""When the replay decides, on the recording's clock: as the live runner does (the replay runs the
runner's own decision loop), at once after a quiet spell and at most once per debounce within a
burst, lines of one instant together, when the decider's own timer comes due or the runner's idle
wake, never before the view is ready and never after the recording ends."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from corral_decision import Clock, DecisionConfig, DecisionService, Explanation, Pending
from corral_decision.bundle import Line, entry
from corral_decision.replay import Replay
from corral_decision.simclock import SimulatedClock
from corral_model import codec
from corral_model.envelopes import Command, CommandResult, EventType, ObjectEvent, Target
from corral_model.longhorn import Volume

S = 1_000_000_000
T0 = 1_800_000_000 * S


class Recorder:
    """A decider that decides nothing, and notes when it was asked to."""

    instances: list[Recorder] = []

    def __init__(self, config: DecisionConfig, clock: Clock) -> None:
        self.clock = clock
        self.applied: list[float] = []
        self.decided: list[float] = []
        self.due: float | None = None
        self.reconsidered: list[float] = []
        self._ready = False
        Recorder.instances.append(self)

    @property
    def ready(self) -> bool:
        return self._ready

    def apply(self, event: ObjectEvent[Any]) -> None:
        self.applied.append(self.clock())
        if event.type is EventType.RESYNCED:
            self._ready = True
        if event.name == "timer":
            self.due = self.clock() + 10.0

    def record_result(self, result: CommandResult) -> None:
        pass

    def adopt(self, command: Command, applied: CommandResult | None) -> bool:
        raise AssertionError("a replay never adopts")

    def decide(self) -> Sequence[Command]:
        self.decided.append(self.clock())
        if self.due is not None and self.due <= self.clock():
            self.due = None
        return ()

    def next_due(self) -> float | None:
        return self.due

    def reconsider_all(self) -> None:
        self.reconsidered.append(self.clock())

    def observed_version(self, target: Target) -> int | None:
        return None

    def expectations(self) -> Iterable[Pending]:
        return ()

    def explain(self, key: str | None = None) -> list[Explanation]:
        return []

    def idle_work(self, budget: int) -> int:
        return 0


FAKE = DecisionService(
    name="fake", config=DecisionConfig, reads={"volume": Volume}, commands=frozenset(), new_decider=Recorder
)


def line(number: int, at_ns: int, name: str = "", resync: bool = False) -> Line:
    kind = EventType.RESYNCED if resync else EventType.DELETED
    event: ObjectEvent[Any] = ObjectEvent(type=kind, kind="volume", namespace="longhorn-system", name=name)
    subject = "lh.obj.volume.longhorn-system." + ("_resync" if resync else name)
    return Line(number, entry("LH_OBJECTS", number, at_ns, subject, {}, codec.encode(event)), at_ns)


def run(lines: list[Line], debounce_s: float) -> Recorder:
    Recorder.instances.clear()
    Replay(FAKE, debounce_s=debounce_s).feed_all(lines)
    (decider,) = Recorder.instances
    return decider


def test_a_quiet_spell_ends_in_a_decision_at_once_a_burst_once_per_debounce() -> None:
    lines = [
        line(1, T0, "a"),  # before the view is ready: nothing is decided
        line(2, T0 + S // 100, resync=True),
        line(3, T0 + 2 * S // 100, "b"),
        line(4, T0 + S, "c"),
    ]
    decider = run(lines, debounce_s=0.05)
    assert decider.applied == [T0 / S, T0 / S + 0.01, T0 / S + 0.02, T0 / S + 1.0]
    # leading edge: ready at line 2, decided at once (0.01); line 3 comes within the debounce of
    # that decision, so it waits until 0.06; line 4 follows a quiet spell: decided at once
    assert decider.decided == [T0 / S + 0.01, T0 / S + 0.06, T0 / S + 1.0]
    # as the live leader does after its takeover, once, before its first decision
    assert decider.reconsidered == [T0 / S + 0.01]


def test_without_debounce_every_line_is_decided_on_and_one_instant_is_one_batch() -> None:
    lines = [line(1, T0, resync=True), line(2, T0 + S // 1000, "a"), line(3, T0 + S, "b")]
    assert run(lines, debounce_s=0.0).decided == [T0 / S, T0 / S + 0.001, T0 / S + 1.0]
    # lines stored at one instant arrive together, as one batch does live: one pass for both
    lines = [line(1, T0, resync=True), line(2, T0, "a"), line(3, T0 + S, "b")]
    assert run(lines, debounce_s=0.0).decided == [T0 / S, T0 / S + 1.0]


def test_timers_are_decided_when_due_but_never_after_the_recording() -> None:
    lines = [line(1, T0, resync=True), line(2, T0 + S, "timer"), line(3, T0 + 20 * S, "late")]
    decider = run(lines, debounce_s=0.0)
    # the timer at 11 s, and the runner's idle passes at most 5 s apart (decision_loop.IDLE_WAKE_S)
    assert decider.decided == [T0 / S + t for t in (0.0, 1.0, 6.0, 11.0, 16.0, 20.0)]
    lines = [line(1, T0, resync=True), line(2, T0 + S, "timer")]
    assert run(lines, debounce_s=0.0).decided == [T0 / S, T0 / S + 1.0]  # the timer at 11 s: not recorded


def test_a_burst_cut_by_until_is_decided_at_until() -> None:
    lines = [line(1, T0, resync=True), line(2, T0 + S // 100, "a")]
    Recorder.instances.clear()
    Replay(FAKE, debounce_s=0.05, until_ns=T0 + 3 * S // 100).feed_all(lines)
    (decider,) = Recorder.instances
    assert decider.decided == [T0 / S, T0 / S + 0.03]  # not at 0.05: the recording stops at 0.03


def test_the_simulated_clock_never_goes_back() -> None:
    clock = SimulatedClock(5.0)
    assert clock.advance_to(7.0) == 7.0 and clock.advance_to(6.0) == 7.0 and clock() == 7.0
