"""A node upgrade acts only once its manager names its node in flight (node.not_yet_named): with the
manager's status writes lost (a run of 429s), an attempt could otherwise run to its end before the
manager's record said it began (the fault explorer's `manager:initializing/api-429`)."""

from __future__ import annotations

from corral_model.envelopes import Command
from tests.unit.v2_upgrade.test_properties import build
from tests.unit.v2_upgrade.world import World


def _manager_writes_lost(world: World, commands: list[Command]) -> None:
    for command in commands:
        if command.target.kind != "DataEngineUpgradeManager" or "upgradingNode" not in str(command.changes):
            world.apply(command)


def _node_upgrade_state(world: World) -> str:
    (node_upgrade,) = world.all("nodedataengineupgrade")
    return str(node_upgrade.status.state)


def test_a_node_upgrade_waits_in_initializing_until_its_manager_names_its_node() -> None:
    world = build(2, [])
    while not world.all("nodedataengineupgrade"):
        world.clock.now += 1.0
        for command in world.decider.decide():
            world.apply(command)
    for _ in range(6):  # every write naming the node is lost; the attempt goes no further
        world.clock.now += 1.0
        _manager_writes_lost(world, world.decider.decide())
        world.data_plane()
    assert _node_upgrade_state(world) == "initializing"
    (node_upgrade,) = world.all("nodedataengineupgrade")
    assert node_upgrade.status.message == "waiting for manager upgrade to name node node-1 in flight"
    # The manager's writes land again: it names the node (its expectation expired, it writes
    # again), and the attempt goes on to the end.
    assert world.run() == "completed"
    assert {u.status.state for u in world.all("nodedataengineupgrade")} == {"completed"}
