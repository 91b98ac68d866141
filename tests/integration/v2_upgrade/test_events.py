"""v2-upgrade's Events through the kit's runner on a real NATS server: the service as deployed
(Events on by default) publishes one Event command per transition of its CRs beside its decisions,
each with the leader's lease term, each let through by the actuator's policy, and none of them held
as an expectation (the upgrade completes with the in-process world playing watcher and actuator)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from corral_actuator.policy import Policy
from corral_bus import Bus
from corral_model.envelopes import Outcome
from corral_v2_upgrade.service import DEFINITION
from corral_v2_upgrade.view import DEFAULT_IM_IMAGE
from tests.fixtures.bus_traffic import commands_seen, report
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.services import decision_replica
from tests.integration.v2_upgrade.test_service import Watcher
from tests.unit.v2_upgrade.world import NEW, cluster, manager, token_of

pytestmark = pytest.mark.integration
POLICY = Policy.load(Path(__file__).resolve().parents[3] / "deploy" / "policy" / "actuator-policy.yaml")


async def test_one_event_per_transition_from_the_running_service(bus: Bus, nats_server: NatsServer) -> None:
    world = cluster(volumes={"vol-a": "node-1"})
    world.put(manager())
    watcher = Watcher(bus, world)
    await watcher.sync()
    await watcher.resync()
    handled = 0

    async with commands_seen(bus, "v2-upgrade", events=True) as seen:

        async def act() -> bool:
            nonlocal handled
            while handled < len(seen):
                command = seen[handled][1]
                handled += 1
                if command.target.kind == "Event":
                    continue  # recorded by the actuator; nothing the decider waits for
                applied = world.apply(command)
                world.data_plane()
                await watcher.sync()
                outcome = Outcome.APPLIED if applied else Outcome.PRECONDITION_FAILED
                await report(bus, command, outcome, token_of(command.target.kind))
            told = [c for _, c in seen if c.target.kind == "Event"]
            return any((c.body or {}).get("reason") == "UpgradeCompleted" for c in told)

        running = decision_replica(DEFINITION, nats_server.url, "v2u-events")
        try:
            await eventually(act, within=60, what="the upgrade to complete and be told")
        finally:
            await running.stop()

    events = [c for _, c in seen if c.target.kind == "Event"]
    told = Counter(
        ((c.body or {})["involvedObject"]["name"], (c.body or {})["reason"], (c.body or {})["message"])
        for c in events
    )
    assert max(told.values()) == 1, told  # each transition once
    reasons = Counter(reason for (_, reason, _) in told)
    assert reasons["NodeUpgradeStarted"] == 3  # one per node, on the manager
    assert reasons["NodeUpgradeCompleted"] == 6  # the same three, on the manager and on each node upgrade
    assert ("upgrade", "UpgradeCompleted", "3 of 3 nodes upgraded") in told
    assert ("upgrade", "NodeUpgradeStarted", f"node node-1: upgrade to {NEW} started (attempt 1)") in told
    for command in events:
        assert command.term > 0  # fenced like every command of the service
        verdict = POLICY.check(command, {DEFAULT_IM_IMAGE: NEW})
        assert verdict.allowed, verdict.reason
