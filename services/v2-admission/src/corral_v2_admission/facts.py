"""The rules' facts, read from the Kubernetes API only when a rule asks for them.

The rules are synchronous and pure; the reads are not. `LazyFacts` answers from what it has and
raises `FactNeeded` for the rest; `judge` then reads that fact and asks the rules again (they are
pure, so asking twice is free). A v1 volume's update so costs no read at all, a v2 attach one list
of Longhorn nodes, and a manager create the managers and the nodes.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable

from corral_v2admission import Denial, admit
from corral_v2admission.objects import Obj


class Fact(enum.Enum):
    MANAGERS = "managers"
    NODES = "nodes"
    IM_IMAGE = "instance-manager image"


class FactNeeded(Exception):
    def __init__(self, fact: Fact) -> None:
        super().__init__(fact.value)
        self.fact = fact


class LazyFacts:
    def __init__(self) -> None:
        self.managers: dict[str, str] | None = None
        self.nodes: dict[str, bool] | None = None
        self.image: str | None = None

    def manager_states(self) -> Iterable[tuple[str, str]]:
        if self.managers is None:
            raise FactNeeded(Fact.MANAGERS)
        return self.managers.items()

    def longhorn_node_count(self) -> int:
        if self.nodes is None:
            raise FactNeeded(Fact.NODES)
        return len(self.nodes)

    def upgrade_requested(self, node: str) -> bool | None:
        if self.nodes is None:
            raise FactNeeded(Fact.NODES)
        return self.nodes.get(node)

    def default_instance_manager_image(self) -> str:
        if self.image is None:
            raise FactNeeded(Fact.IM_IMAGE)
        return self.image


Reader = Callable[[Fact, LazyFacts], Awaitable[None]]


async def judge(
    resource: str,
    operation: str,
    old: Obj | None,
    new: Obj | None,
    read: Reader,
    facts: LazyFacts | None = None,
) -> Denial | None:
    """The rules' answer, reading each fact they ask for once (`read` fills it in `facts`)."""
    facts = facts or LazyFacts()
    for _ in range(len(Fact) + 1):
        try:
            return admit(resource, operation, old, new, facts)
        except FactNeeded as need:
            await read(need.fact, facts)
    raise RuntimeError(f"the rules kept asking for facts on {operation} {resource}")
