"""A tiny simulated cluster for property tests: the true state, a lagging and reordering event
stream, an actuator that applies commands under their preconditions (or refuses them at random),
and a volume controller that finishes upgrades. Time is a fake clock.

Lag is bounded (MAX_LAG): events, results and commands older than that are delivered (or, for
commands, dropped as lost) before time moves on. The decider's `command_ttl` is larger than twice
that bound, which is the assumption under which its per-node limit is exact.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec

from corral_engine_upgrade.core import EngineUpgradeDecider
from corral_model import longhorn as lh
from corral_model.envelopes import Command, CommandResult, EventType, ObjectEvent, Outcome
from tests.unit.engine_upgrade.cluster import NS, Clock

MAX_LAG = 20.0
KINDS: dict[type[Any], str] = {
    lh.Volume: "volume",
    lh.Replica: "replica",
    lh.EngineImage: "engineimage",
    lh.Setting: "setting",
    lh.Node: "node",
}


@dataclasses.dataclass
class InTransit:
    sent_at: float
    item: Any


class SimCluster:
    def __init__(self, clock: Clock, decider: EngineUpgradeDecider) -> None:
        self.clock = clock
        self.decider = decider
        self.rv = 0
        self.volumes: dict[str, lh.Volume] = {}
        self.limit = 0
        self.events: list[InTransit] = []
        self.commands: list[InTransit] = []
        self.results: list[InTransit] = []
        self.applied: list[str] = []  # volume names in the order their command was applied

    # --- the true state ----------------------------------------------------------------------

    def write(self, obj: Any, type_: EventType = EventType.MODIFIED) -> Any:
        """Change the true state: a new resourceVersion and an event on its way to the decider."""
        self.rv += 1
        obj, event = versioned_write(obj, self.rv, type_, self.volumes)
        self.events.append(InTransit(self.clock.now, event))
        return obj

    def resync(self, kinds: frozenset[str]) -> None:
        for kind in sorted(kinds):
            self.events.append(
                InTransit(
                    self.clock.now, ObjectEvent(type=EventType.RESYNCED, kind=kind, namespace=NS, name="")
                )
            )

    def true_in_flight(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in self.volumes.values():
            if v.spec.image != v.status.current_image:
                counts[v.status.owner_id] = counts.get(v.status.owner_id, 0) + 1
        return counts

    def could_apply(self, command: Command) -> bool:
        volume = self.volumes.get(command.target.name)
        return volume is not None and _holds(volume, command)

    def potential_in_flight(self) -> dict[str, int]:
        """In flight in the true state plus queued commands that would still apply."""
        counts = self.true_in_flight()
        for queued in self.commands:
            command: Command = queued.item
            if self.could_apply(command):
                owner = self.volumes[command.target.name].status.owner_id
                counts[owner] = counts.get(owner, 0) + 1
        return counts

    # --- actions the test draws ----------------------------------------------------------------

    def deliver_event(self, index: int, duplicate: bool) -> None:
        transit = self.events[index] if duplicate else self.events.pop(index)
        self.decider.apply(transit.item)

    def deliver_result(self, index: int) -> None:
        self.decider.record_result(self.results.pop(index).item)

    def decide(self) -> list[Command]:
        commands = self.decider.decide()
        self.commands.extend(InTransit(self.clock.now, c) for c in commands)
        return commands

    def actuate(self, index: int, spurious_failure: bool) -> None:
        command: Command = self.commands.pop(index).item
        volume = self.volumes.get(command.target.name)
        if volume is None:
            outcome = Outcome.NOT_FOUND
        elif spurious_failure or not _holds(volume, command):
            outcome = Outcome.PRECONDITION_FAILED
        else:
            image = command.changes[0].value
            self.write(
                msgspec.structs.replace(volume, spec=msgspec.structs.replace(volume.spec, image=image))
            )
            self.applied.append(command.target.name)
            outcome = Outcome.APPLIED
        result = CommandResult(
            command_id=command.id, service=command.service, target=command.target, outcome=outcome
        )
        self.results.append(InTransit(self.clock.now, result))

    def finish_upgrade(self, name: str) -> None:
        """The volume controller completes a live or offline upgrade."""
        volume = self.volumes[name]
        status = msgspec.structs.replace(volume.status, current_image=volume.spec.image)
        self.write(msgspec.structs.replace(volume, status=status))

    def tick(self, seconds: float) -> None:
        """Move time on, first flushing whatever would otherwise exceed the lag bound."""
        horizon = self.clock.now + seconds - MAX_LAG
        for transit in [t for t in self.events if t.sent_at <= horizon]:
            self.events.remove(transit)
            self.decider.apply(transit.item)
        for transit in [t for t in self.results if t.sent_at <= horizon]:
            self.results.remove(transit)
            self.decider.record_result(transit.item)
        # A command older than the bound is lost (the actuator would refuse it as expired).
        self.commands = [t for t in self.commands if t.sent_at > horizon]
        self.clock.advance(seconds)


def _holds(volume: lh.Volume, command: Command) -> bool:
    document = msgspec.to_builtins(volume)
    for precondition in command.preconditions:
        node: Any = document
        for part in precondition.path.strip("/").split("/"):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        if node != precondition.value:
            return False
    return True


def versioned_write(
    obj: Any, rv: int, type_: EventType, volumes: dict[str, lh.Volume]
) -> tuple[Any, ObjectEvent[Any]]:
    """`obj` written at resourceVersion `rv` into the true state (`volumes` kept current), and the
    event the watcher would publish for it."""
    obj = msgspec.structs.replace(
        obj, metadata=msgspec.structs.replace(obj.metadata, resource_version=str(rv))
    )
    if isinstance(obj, lh.Volume):
        if type_ is EventType.DELETED:
            volumes.pop(obj.metadata.name, None)
        else:
            volumes[obj.metadata.name] = obj
    event: ObjectEvent[Any] = ObjectEvent(
        type=type_,
        kind=KINDS[type(obj)],
        namespace=NS,
        name=obj.metadata.name,
        resource_version=str(rv),
        object=obj,
    )
    return obj, event
