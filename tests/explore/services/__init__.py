"""What the explorer needs to know of a decision service: its world (seed, simulated durations,
the kinds the watcher follows, its deciders), how to bring it into each of its states (a trap on
the write that enters the state), what its own target is (deleted, changed, its setting changed
again), and when it has finished or what it says it waits for.

The base class holds the defaults every service shares; each module below holds one service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from corral_decision import DecisionService
from corral_sandbox.seeds import Seed
from corral_sandbox.simulator import SimConfig
from tests.explore.faults import Clear
from tests.explore.model import Cell, NotExpressible
from tests.explore.trap import Trap
from tests.explore.world import World
from tests.fixtures.sandbox import DEFAULT_IMAGE


@dataclass(frozen=True)
class Progress:
    done: bool
    says: str = ""
    """What is still missing, and what the service shows about it (status message, condition)."""


class Explored:
    name: ClassVar[str]
    states: ClassVar[tuple[str, ...]]
    kinds: ClassVar[tuple[str, ...]]
    limit_setting: ClassVar[str] = ""
    decider_settings: ClassVar[dict[str, Any]] = {}
    volume_image: ClassVar[str] = DEFAULT_IMAGE
    data_engine: ClassVar[str] = "v1"
    recover_s: ClassVar[float] = 0.0
    """The service's own liveness bound (0: the matrix's default)."""

    def seed(self) -> Seed:
        raise NotImplementedError

    def sim_config(self) -> SimConfig:
        raise NotImplementedError

    def deciders(self) -> list[DecisionService[Any]]:
        """The explored decider first, then any the world also needs."""
        raise NotImplementedError

    def observe(self, world: World) -> None:
        """Register the service's own write-level judges (before any service starts)."""

    async def prepare(self, world: World) -> None:
        """Bring the cluster to where the work starts (volumes attached, settled)."""

    def arm(self, world: World, state: str) -> Trap:
        raise NotImplementedError

    async def start(self, world: World, state: str) -> None:
        """Give the service its work (an operator's move); the trap fires on the way."""
        raise NotImplementedError

    async def after_clear(self, world: World, state: str) -> None:
        """The operator's next move once the fault cleared, where the state asks for one."""

    async def progress(self, world: World) -> Progress:
        raise NotImplementedError

    async def after_finish(self, world: World) -> str:
        """What is still wrong once the service finished its part ("" for nothing)."""
        return ""

    async def violations(self, world: World) -> list[str]:
        """The service's own safety rules broken so far."""
        return []

    def known(self, cell: Cell, detail: str) -> str:
        """The issue-24 behaviour a failure shows, when it is one of the five known ones."""
        return ""

    def event_subjects(self, world: World) -> list[str]:
        """LH_OBJECTS subjects of the objects the state is about (for duplicate/out-of-order events)."""
        return []

    async def delete_target(self, world: World) -> Clear:
        raise NotExpressible(f"{self.name}: no target to delete")

    async def change_target(self, world: World) -> Clear:
        raise NotExpressible(f"{self.name}: no target to change")

    async def change_setting(self, world: World) -> Clear:
        raise NotExpressible(f"{self.name}: no setting to change")
