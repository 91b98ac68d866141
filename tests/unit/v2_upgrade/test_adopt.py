"""A new leader adopts its predecessor's commands only while they can still apply and the view
does not show them yet; an adopted one holds its target (no second write), a shown one does not
(else the target would wait for the applied TTL)."""

from __future__ import annotations

from corral_model.envelopes import CommandResult, Outcome
from tests.unit.v2_upgrade.world import cluster, manager


def test_a_command_already_shown_is_not_adopted_and_one_in_flight_is() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    world.start()
    [first] = world.decider.decide()  # the manager's "" -> initializing, not applied yet
    successor = world.fresh_decider()
    result = CommandResult(
        command_id=first.id, service=first.service, target=first.target, outcome=Outcome.APPLIED
    )
    assert successor.adopt(first, None)
    assert successor.decide() == []  # held: the predecessor's write is still out
    world.apply(first)
    shown = world.fresh_decider()
    assert not shown.adopt(first, result)  # the view shows it: nothing to wait for
    [second] = shown.decide()
    assert second.reason == "initializing -> upgrading"


def test_a_create_of_an_existing_object_is_not_adopted() -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    world.start()
    for _ in range(3):
        world.step()
    [create] = [c for c in world.applied if c.verb == "create"]
    assert not world.fresh_decider().adopt(create, None)
