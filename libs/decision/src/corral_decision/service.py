"""What a decision service is to the kit: a name, the kinds it reads, the kinds it commands, its
configuration and a way to build its `Decider`. Nothing else.

Every place that needs to know the decision services (the runner, `corral plan`, `corral replay`,
`corral progress`, `corral run`) reads these definitions, found through the `corral.deciders` entry
point group (registry.py), never by looking at the checkout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, TypeVar

import msgspec
from prometheus_client.core import Metric

from corral_decision.coexistence import LonghornLoop, Mode
from corral_decision.decider import Clock, Runnable
from corral_decision.progress import Progress
from corral_decision.timing import Timing
from corral_model.envelopes import Command
from corral_model.kinds import KINDS
from corral_model.subjects import OBJECTS_PREFIX, escape_token
from corral_runtime.config import ServiceConfig
from corral_runtime.startup import StartupHook


class DecisionConfig(ServiceConfig, kw_only=True, frozen=True):
    """What the kit's runner reads; a service subclasses it to add its rules' own settings."""

    lease_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 2.5
    """Shorter than other services' 10 s: a standby leads within `Lease.worst_failover` (2.4 s) of
    the leader going silent (a frozen process, a partition) instead of about 11 s, and within
    `corral_bus.lease.fast_failover` (0.9 s) of its connection closing (kill -9, a crash), which the
    liveness probe proves. Safe because the holder stops leading before any standby may take over
    (the ratios and rules in corral_bus.lease), and commands carry the lease term, so the actuator
    fences off a leader that missed losing it."""
    debounce_s: Annotated[float, msgspec.Meta(ge=0)] = 0.01
    """At most one decision pass per this long while events keep coming (the first event after a
    quiet spell is decided at once). Under a steady stream of changes a decision waits up to this
    long, so it is most of the decision stage's latency (bench_pipeline: 50 ms gave a p50 of 42 ms
    at 500 changes/s); `decide()` costs O(what changed), so passes 10 ms apart cost little more."""
    handover_delay_s: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    """An extra pause after a new leader has caught up with the bus (takeover), before it decides.
    Not needed for any limit: the takeover adopts the predecessor's pending commands."""
    handover_timeout_s: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    """The longest a new leader waits to read LH_OBJECTS and LH_RESULTS to their ends; then it goes
    on (logged). Writes the actuator reported are waited for regardless (up to applied_ttl_s)."""
    command_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 60.0
    """A command with neither a result nor a visible effect after this long is presumed lost.
    Keep it above the actuator's `max_command_age_s` (default 30 s) plus the worst clock skew
    between pods: the actuator then refuses a command before its issuer forgets it."""
    applied_ttl_s: Annotated[float, msgspec.Meta(gt=0)] = 600.0
    """After an `applied` result, how long the view may lag before the command stops counting."""
    retry_backoff_s: Annotated[float, msgspec.Meta(gt=0)] = 120.0
    """After a refusal with no fresher state in view, wait this long before the same command (its
    next attempt, under an id of its own: LH_COMMANDS' dedup window does not drop it)."""
    idle_batch: Annotated[int, msgspec.Meta(ge=0)] = 5000
    """When not deciding, let the decider do this much deferred work per round (`idle_work`)."""
    mode: Mode = Mode.REPLACE
    """Beside an unmodified longhorn-manager (coexistence.py, docs/operating.md): `replace` (no
    manager runs this loop: act), `act` (act only while Longhorn's loop is off, else refuse),
    `auto` (act while it is off, else observe) or `observe` (report only)."""

    def timing(self) -> Timing:
        """The expectation TTLs and retry backoff, as every decider takes them (timing.py)."""
        return Timing(
            command_ttl=self.command_ttl_s, applied_ttl=self.applied_ttl_s, retry_backoff=self.retry_backoff_s
        )


ConfigT = TypeVar("ConfigT", bound=DecisionConfig)


def _by_verb(command: Command) -> str:
    return str(command.verb)


EVENT_TOKEN, EVENT_KIND = "event", "Event"
"""core/v1 Events: written (through the actuator, e.g. why a setting is pending), never watched,
so not in the KINDS table the watcher lists from."""


@dataclass(frozen=True, eq=False)
class DecisionService(Generic[ConfigT]):
    """One decision service, as the kit runs it."""

    name: str
    config: type[ConfigT]
    reads: Mapping[str, type[Any]]
    """Kind token (`volume`, `setting`…) → the Struct its LH_OBJECTS events decode into."""
    commands: frozenset[str]
    """Kind tokens of the objects it commands (`lh.cmd.<name>.<token>.…`); `event` for Events."""
    new_decider: Callable[[ConfigT, Clock], Runnable]
    gauges: Callable[[Any], Iterable[Metric]] | None = None
    """Figures read from the decider when Prometheus scrapes (per node, per setting…)."""
    command_mode: Callable[[Command], str] = _by_verb
    """The `mode` label of the commands counter."""
    startup: tuple[StartupHook, ...] = ()
    """Hooks the harness runs before the service acts (the upgrade-path gate)."""
    progress: Callable[..., Progress] | None = None
    """A fresh figures model for `corral progress <name>`, where the service offers one; called
    with `limit_override=N` for corral's own limit beside a running longhorn-manager."""
    longhorn_loop: LonghornLoop | None = None
    """The longhorn-manager loop it re-implements and how to tell it is on (coexistence.py)."""
    _subject_tokens: dict[str, str] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        for token in self.commands:
            self._subject_tokens[EVENT_KIND if token == EVENT_TOKEN else KINDS[token].kind] = token

    @property
    def metric_prefix(self) -> str:
        return "corral_" + self.name.replace("-", "_")

    def object_filters(self, namespace: str) -> list[str]:
        """LH_OBJECTS subjects of the kinds the decider reads, in `namespace`; a cluster-scoped
        kind (`kubenode`) is published without a namespace (the `_` token), as the watcher does."""
        ns = escape_token(namespace)
        return [
            f"{OBJECTS_PREFIX}.{kind}.{ns if KINDS[kind].namespaced else escape_token('')}.>"
            for kind in sorted(self.reads)
        ]

    def command_token(self, kind: str) -> str | None:
        """The subject token for a command on `kind` (`Volume` → `volume`); None: not its to command.
        Every service may record Events (`event`: the actuator policy's common rule)."""
        if kind == "Event":
            return "event"
        return self._subject_tokens.get(kind)
