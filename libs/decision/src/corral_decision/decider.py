"""The `Decider` protocol: what a decision service's rules are, apart from all plumbing; and
`Runnable`, what the kit makes of them for the runner, `corral plan` and `corral replay` to drive.

A decider is pure (no I/O; time comes from the clock it was built with), so the very same object runs
live under the kit's runner, on a snapshot in `corral plan`, on a recorded bundle in `corral replay`
(driven by a simulated clock) and in property tests. It supplies its rules only: from its view, the
commands it wants now and when it wants to be asked again, how a target is keyed, and why a target
waits (`explain`, whose `group` is what a limit is counted per). Everything else is the kit's
(kit.py): expectations (issued, applied, refused, expired, adopted from another replica, which is
what makes a change of leader safe), retry backoff, timers and per-target holds; and the runner's:
reading the bus, the lease, takeover, debounce, publishing, metrics, health.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from corral_model.envelopes import Command, CommandResult, ObjectEvent, Target

Clock = Callable[[], float]
"""Wall-clock seconds (`time.time` live, a `SimulatedClock` in replay)."""


class InvalidEvent(ValueError):
    """An event the decider cannot use (unknown kind, malformed object): reported, never applied."""


class Explanation(msgspec.Struct, frozen=True, kw_only=True):
    """Why one target is not acted on (or, with `reason` of a pending command, that it is).

    `group` is what the service's limit is counted per (the owner node of a volume, an instance
    manager's node…), empty where there is none; `detail` qualifies the reason."""

    kind: str
    namespace: str
    name: str
    reason: str
    group: str = ""
    detail: str = ""

    @property
    def key(self) -> str:
        return target_key(self.kind, self.namespace, self.name)


class Pending(msgspec.Struct, frozen=True, kw_only=True):
    """One expectation: a command issued (or adopted) that the view does not reflect yet."""

    command_id: str
    target: Target
    issued_at: float
    applied: bool = False
    """The actuator reported it applied; it counts until the view shows the change."""


def target_key(kind: str, namespace: str, name: str) -> str:
    """`Kind/namespace/name`, the key `explain` and `corral replay --explain` take."""
    return f"{kind}/{namespace}/{name}"


@runtime_checkable
class Decider(Protocol):
    """The rules of one decision service, as a subclass of the kit (`DeciderKit`, `DeciderBase`)
    supplies them."""

    @property
    def ready(self) -> bool:
        """The view is complete (a RESYNCED marker seen for every kind it reads): decisions mean
        something. Nothing is decided before."""

    def apply(self, event: ObjectEvent[Any]) -> None:
        """Fold one object event into the view, settling what it shows. Raises `InvalidEvent` and
        changes nothing when the event cannot be used."""

    def reconcile(self, now: float) -> Sequence[Command]:
        """The commands the rules want now, each `issue`d to the kit; a wait with a time asks to be
        asked again (`ask_again(at, key)`)."""

    def look_again(self, key: Any) -> None:
        """A target's timer came due, or its command was refused or expired: judge it again."""

    def key_for(self, target: Target) -> Any:
        """How the rules key a commanded target (None: not theirs)."""

    def may_adopt(self, command: Command) -> bool:
        """Whether another replica's command can still apply on this view (and so must count)."""

    def explain(self, key: str | None = None) -> list[Explanation]:
        """Why each target is or is not acted on, as of now; `key` (`target_key`) picks one."""


@runtime_checkable
class Runnable(Protocol):
    """A decider as the runner, takeover, plan and replay drive it: its rules on the kit."""

    @property
    def ready(self) -> bool: ...

    def apply(self, event: ObjectEvent[Any]) -> None: ...

    def record_result(self, result: CommandResult) -> None:
        """Settle the expectation of one of its commands (applied: wait for the view; refused: free)."""

    def adopt(self, command: Command, applied: CommandResult | None) -> bool:
        """Count a command of this service it did not issue itself (another replica's, or an earlier
        run's) as in flight, with its `applied` result if one was seen. True when it now counts it
        and did not before; idempotent."""

    def decide(self) -> Sequence[Command]:
        """The commands to publish now (at the clock's time); each becomes an expectation."""

    def next_due(self) -> float | None:
        """When `decide` next has timed work (an expiry, a retry), so a runner can sleep until then."""

    def reconsider_all(self) -> None:
        """Look at every target again at the next `decide` (a replica that just became leader)."""

    def observed_version(self, target: Target) -> int | None:
        """The resourceVersion of `target` the view holds (None: not in the view). A new leader
        waits until its view holds every write the actuator reported before it decides."""

    def expectations(self) -> Iterable[Pending]:
        """Every command in flight that the view does not reflect yet."""

    def explain(self, key: str | None = None) -> list[Explanation]: ...

    def idle_work(self, budget: int) -> int:
        """Deferred bookkeeping a standby may do while it does not decide (e.g. judging targets
        lazily after a rules change); returns how much is left (0: none)."""
