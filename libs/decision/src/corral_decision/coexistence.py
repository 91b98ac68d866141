"""Running beside an unmodified longhorn-manager without both driving the same loop.

Each decision service re-implements a loop longhorn-manager also runs (automatic engine upgrade,
the setting controller's danger-zone sync, the instance-manager restart). Beside a real Longhorn
both would act on the same objects, so every service runs in one `Mode` (`CORRAL_MODE`):

* `replace`: corral is the only driver: for clusters without longhorn-manager's loop (the sandbox,
  a manager built without it). It acts even while Longhorn's own loop is on, so never beside a
  real Longhorn. The library default (tests, `corral run` sets it explicitly); the chart and the
  compose file deploy `auto`.
* `act`: beside longhorn-manager, it acts only while Longhorn's own loop is off; while it is on it
  *refuses* (a Warning Event, the readiness probe `coexistence` failing, the `coexistence` gauge).
* `auto`: beside longhorn-manager, it acts while Longhorn's loop is off and observes while it is on.
* `observe`: it never acts, only reports.

What "Longhorn's loop is on" means is the service's own small predicate on its view
(`LonghornLoop.is_on`): engine-upgrade's is "`concurrent-automatic-engine-upgrade-per-node-limit`
> 0"; setting-sync's and im-restart's are always true, since longhorn-manager has no switch for
them. The kit applies the mode to whatever a decider decides (`Coexistence.screen`), so every
service gets it and a decider stays the same in every mode:

* acting, its commands go out;
* observing or refusing, each command that would change the cluster is *withheld*: it is
  reported instead, as a `CorralWouldAct` Event on its target (once per target and intent, not
  per decision pass), and handed back to the decider as a dry-run result, which frees what it held
  (the decider then waits for fresher state or its retry backoff, as after any refusal). Event
  commands still go out: reporting is what observing is for.

A change of stance is itself an Event on the object the service names (`LonghornLoop.reported_on`,
by default the `current-longhorn-version` Setting, where the upgrade-path gate reports too). In mode
`replace` nothing here runs: no stance Events, nothing withheld.

Whatever the mode, the service says it in its log: its mode and stance once it first decides, and
again on every change of stance (`on_stance`), so an operator reading one pod's log knows whether it
drives Longhorn.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from corral_decision.decider import Runnable
from corral_decision.events import EventType, event_command, is_event
from corral_model.envelopes import Command, CommandResult, Outcome, Target

VERSION_SETTING = "current-longhorn-version"
_VERSION_SETTING = Target(kind="Setting", namespace="", name=VERSION_SETTING)


class Mode(enum.StrEnum):
    REPLACE = "replace"
    ACT = "act"
    AUTO = "auto"
    OBSERVE = "observe"


class Stance(enum.StrEnum):
    """What a service does right now, given its mode and Longhorn's loop."""

    ACTING = "acting"
    OBSERVING = "observing"
    REFUSING = "refusing"


def stance_of(mode: Mode, longhorn_loop_on: bool) -> Stance:
    if mode is Mode.REPLACE:
        return Stance.ACTING
    if mode is Mode.OBSERVE:
        return Stance.OBSERVING
    if not longhorn_loop_on:
        return Stance.ACTING
    return Stance.REFUSING if mode is Mode.ACT else Stance.OBSERVING


def _never_on(decider: Any) -> bool:
    return False


def _no_state(decider: Any) -> str:
    return ""


@dataclass(frozen=True)
class LonghornLoop:
    """The loop of longhorn-manager a service re-implements, as the kit needs to know it."""

    name: str
    """What Longhorn calls it, for Events and logs ("automatic engine upgrade")."""
    is_on: Callable[[Any], bool] = _never_on
    """On the service's decider (its view): would Longhorn's loop act now?"""
    state: Callable[[Any], str] = _no_state
    """The view's evidence, for messages ("concurrent-…-per-node-limit is 2")."""
    switch_off: str = ""
    """How an operator turns Longhorn's loop off; empty: it cannot be."""
    reported_on: Target = _VERSION_SETTING
    """The object stance Events are recorded on (namespace: the service's)."""


class Coexistence:
    """One replica's stance and what it withholds, applied to every decision pass by the runner."""

    REPORTED_LIMIT = 50_000
    """Targets whose withheld intent was reported; past it the memory starts over (a repeat report
    then only increments its Event's count)."""

    def __init__(
        self,
        service: str,
        loop: LonghornLoop | None,
        mode: Mode,
        namespace: str,
        decider: Runnable,
        registry: CollectorRegistry | None = None,
        on_stance: Callable[[Mode, Stance, str], None] | None = None,
    ) -> None:
        self.service = service
        self.loop = loop or LonghornLoop(name=f"{service} (no counterpart in longhorn-manager)")
        self.mode = mode
        self.namespace = namespace
        self.decider = decider
        self.last: Stance | None = None
        self.on_stance = on_stance
        """Told (mode, stance, why) on the first decision pass and on every change of stance."""
        self._logged: Stance | None = None
        self._reported: dict[tuple[str, str, str], str] = {}
        prefix = "corral_" + service.replace("-", "_")
        self.withheld = Counter(
            f"{prefix}_withheld_commands",
            "Commands decided but not published: observing, or refusing to double-drive.",
            ["stance"],
            registry=registry,
        )
        if registry is not None:
            registry.register(_StanceGauge(prefix, self))

    def longhorn_loop_on(self) -> bool:
        return bool(self.decider.ready and self.loop.is_on(self.decider))

    def stance(self) -> Stance:
        return stance_of(self.mode, self.longhorn_loop_on())

    @property
    def refusing(self) -> bool:
        return self.stance() is Stance.REFUSING

    def screen(self, commands: Sequence[Command], now: float) -> tuple[list[Command], list[CommandResult]]:
        """The commands to publish for this pass (stance Events and reports included) and the
        dry-run results for those withheld, which the runner hands back to the decider."""
        stance = self.stance()
        if stance is not self._logged:
            self._logged = stance
            if self.on_stance is not None:
                self.on_stance(self.mode, stance, self.why(stance))
        if self.mode is Mode.REPLACE:
            return list(commands), []
        out: list[Command] = []
        if stance is not self.last:
            out.append(self._stance_event(stance, now))
            if stance is Stance.ACTING and self.last is not None:
                self.decider.reconsider_all()  # what it withheld it may now do
                self._reported.clear()
            self.last = stance
        if stance is Stance.ACTING:
            out.extend(commands)
            return out, []
        results: list[CommandResult] = []
        for command in commands:
            if is_event(command):
                out.append(command)
                continue
            self.withheld.labels(str(stance)).inc()
            results.append(self._withheld_result(command, stance))
            report = self._report(command, stance, now)
            if report is not None:
                out.append(report)
        return out, results

    # --- what is said --------------------------------------------------------------------------------

    def why(self, stance: Stance) -> str:
        loop = self.loop
        state = loop.state(self.decider)
        evidence = f" ({state})" if state else ""
        if stance is Stance.ACTING:
            if self.mode is Mode.REPLACE:
                return f"mode replace: no longhorn-manager runs {loop.name} beside corral"
            return f"mode {self.mode}: Longhorn's {loop.name} is off{evidence}"
        if self.mode is Mode.OBSERVE:
            return f"mode observe: reports only{evidence}"
        if stance is Stance.OBSERVING:
            return f"mode auto: Longhorn's {loop.name} is on{evidence}"
        how = loop.switch_off or "it cannot be switched off; run this service in mode observe or auto"
        return f"mode act, but Longhorn's {loop.name} is on{evidence}: acting would drive it twice ({how})"

    def _stance_event(self, stance: Stance, now: float) -> Command:
        about = self.loop.reported_on
        if not about.namespace:
            about = Target(kind=about.kind, namespace=self.namespace, name=about.name)
        if stance is Stance.REFUSING:
            type_, reason, lead = EventType.WARNING, "CorralRefusedToAct", "refuses to act"
        elif stance is Stance.OBSERVING:
            type_, reason, lead = EventType.NORMAL, "CorralObserving", "observes only, issues no commands"
        else:
            type_, reason, lead = EventType.NORMAL, "CorralActing", "acts"
        message = f"corral {self.service} {lead}: {self.why(stance)}"
        return event_command(
            service=self.service, about=about, type_=type_, reason=reason, message=message, now=now
        )

    def _report(self, command: Command, stance: Stance, now: float) -> Command | None:
        """A `CorralWouldAct` Event on the command's target, unless this intent was reported."""
        target = command.target
        key = (target.kind, target.namespace, target.name)
        intent = f"{command.verb} {target.kind} {target.name}"
        if command.reason:
            intent += f": {command.reason}"
        if self._reported.get(key) == intent:
            return None
        if len(self._reported) >= self.REPORTED_LIMIT:
            self._reported.clear()
        self._reported[key] = intent
        held = "observing" if stance is Stance.OBSERVING else "refusing to double-drive"
        message = f"corral {self.service} would {intent} (withheld, {held}: {self.why(stance)})"
        uid = target.uid or self._uid_of(target)
        return event_command(
            service=self.service,
            about=Target(kind=target.kind, namespace=target.namespace, name=target.name, uid=uid),
            type_=EventType.NORMAL,
            reason="CorralWouldAct",
            message=message,
            now=now,
        )

    def _uid_of(self, target: Target) -> str:
        """A decider that knows its objects' uids (`uid_of(target)`) names them, so the Event is
        listed by `kubectl describe` (which matches on involvedObject.uid); else none."""
        known = getattr(self.decider, "uid_of", None)
        return str(known(target)) if callable(known) else ""

    def _withheld_result(self, command: Command, stance: Stance) -> CommandResult:
        return CommandResult(
            command_id=command.id,
            service=command.service,
            target=command.target,
            outcome=Outcome.APPLIED,
            detail=f"withheld ({stance}), not sent to the actuator",
            dry_run=True,
        )


class _StanceGauge(Collector):
    """`corral_<service>_coexistence{mode,stance}` = 1 and `…_longhorn_loop_on`, at scrape time."""

    def __init__(self, prefix: str, coexistence: Coexistence) -> None:
        self.prefix = prefix
        self.coexistence = coexistence

    def collect(self) -> list[Metric]:
        c = self.coexistence
        stance = GaugeMetricFamily(
            f"{self.prefix}_coexistence",
            "The service's mode beside longhorn-manager and what it does now (1 for the current one).",
            labels=["mode", "stance"],
        )
        stance.add_metric([str(c.mode), str(c.stance())], 1)
        loop_on = GaugeMetricFamily(
            f"{self.prefix}_longhorn_loop_on", f"Longhorn's own {c.loop.name} would act now (1) or not (0)."
        )
        loop_on.add_metric([], 1 if c.longhorn_loop_on() else 0)
        return [stance, loop_on]
