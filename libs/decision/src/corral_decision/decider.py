"""The `Decider` protocol: what a decision service's rules are, apart from all plumbing.

A decider is pure (no I/O; time comes from the clock it was built with), so the very same object runs
live under the kit's runner, on a snapshot in `corral plan`, on a recorded bundle in `corral replay`
(driven by a simulated clock) and in property tests. Everything a decider does not decide (reading
the bus, the lease, takeover, debounce, publishing, metrics, health) is the runner's.

A decider counts the commands it issued and has not yet seen reflected in its view ("expectations",
as client-go calls them), so a lagging view can never make it exceed a limit; `adopt` counts another
replica's commands the same way, which is what makes a change of leader safe.
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
    """The rules of one decision service, as the kit's runner, plan and replay drive them."""

    @property
    def ready(self) -> bool:
        """The view is complete (a RESYNCED marker seen for every kind it reads): decisions mean
        something. Nothing is decided before."""

    def apply(self, event: ObjectEvent[Any]) -> None:
        """Fold one object event into the view. Raises `InvalidEvent` and changes nothing when the
        event cannot be used."""

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

    def explain(self, key: str | None = None) -> list[Explanation]:
        """Why each target is or is not acted on, as of now; `key` (`target_key`) picks one."""

    def idle_work(self, budget: int) -> int:
        """Deferred bookkeeping a standby may do while it does not decide (e.g. judging targets
        lazily after a rules change); returns how much is left (0: none)."""
