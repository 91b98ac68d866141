"""engine-upgrade in mode act under the runtime harness, on a real NATS server: while Longhorn's own
automatic engine upgrade is on (its per-node limit setting above 0) the service is not ready, its
`coexistence` readiness condition says why, and it issues no upgrade; switched off, it is ready and
upgrades with corral's own limit."""

from __future__ import annotations

import pytest

from corral_bus import Bus
from corral_engine_upgrade.service import DEFINITION
from corral_engine_upgrade.view import LIMIT_SETTING
from tests.fixtures.bus_traffic import FakeWatcher, commands_seen
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.services import decision_replica
from tests.unit.decision.test_coexistence import NS, engine_upgrade_cluster
from tests.unit.engine_upgrade import cluster as eu

pytestmark = pytest.mark.integration


async def test_mode_act_is_not_ready_while_longhorns_loop_runs(bus: Bus, nats_server: NatsServer) -> None:
    watcher = FakeWatcher(bus, NS)
    await engine_upgrade_cluster(watcher, longhorn_limit="2")
    async with commands_seen(bus, "engine-upgrade") as seen:
        replica = decision_replica(
            DEFINITION, nats_server.url, "eu-act", mode="act", per_node_limit=1, retry_backoff_s=0.5
        )
        try:
            await eventually(lambda: replica.ctx is not None and replica.runner is not None, what="started")
            assert replica.ctx is not None and replica.runner is not None
            readiness = replica.ctx.readiness
            await eventually(lambda: replica.runner is not None and replica.runner.bootstrapped.is_set())
            await eventually(
                lambda: replica.runner is not None and replica.runner.coexistence.last is not None
            )
            snapshot = readiness.snapshot()
            assert snapshot["bootstrap"] and snapshot["coexistence"] is False
            assert not readiness.ready
            assert seen == []  # no volume patch (the Events are left out of `seen`)

            await watcher.put(eu.setting(LIMIT_SETTING, "0"))
            await eventually(
                lambda: readiness.snapshot()["coexistence"], what="ready once Longhorn's loop is off"
            )
            await eventually(lambda: len(seen) == 2, within=10, what="one upgrade per owner node")
            # corral's limit of 1 per owner node: one of n1's volumes (v1, v2) and one of n2's (v3,
            # v4); which one depends on whether the refused intents' retry backoff has passed
            owners = {"v1": "n1", "v2": "n1", "v3": "n2", "v4": "n2"}
            assert sorted(owners[c.target.name] for _, c in seen) == ["n1", "n2"]
        finally:
            await replica.stop()
