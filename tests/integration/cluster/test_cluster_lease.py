"""The lease's fast takeover on a 3-server cluster: "no responders" proves a holder gone only when
asked on the server the holder renewed through (corral_bus.liveness). A standby on another server
knows the holder's subscription only over a route, so it keeps to the TTL rule.
"""

from __future__ import annotations

import time

import pytest

from corral_bus import connect
from corral_bus.lease import Lease, fast_failover, worst_failover
from corral_decision import DecisionConfig
from tests.fixtures.nats import reset_jetstream
from tests.fixtures.nats_cluster import NatsCluster
from tests.fixtures.processes import eventually

pytestmark = pytest.mark.integration

TTL = DecisionConfig().lease_ttl_s
BUCKET = "cluster-test-leases"
SLACK_S = 0.3


async def test_only_a_standby_on_the_holders_server_takes_over_early(nats_cluster: NatsCluster) -> None:
    first, second = nats_cluster.servers[0], nats_cluster.servers[1]
    holders = await connect(first.url, "holders")
    near = await connect(first.url, "standby-near")
    far = await connect(second.url, "standby-far")
    leases = {
        "holder-near": Lease(holders, "near", "a", ttl=TTL, bucket=BUCKET, replicas=3),
        "holder-far": Lease(holders, "far", "a", ttl=TTL, bucket=BUCKET, replicas=3),
        "near": Lease(near, "near", "b", ttl=TTL, bucket=BUCKET, replicas=3),
        "far": Lease(far, "far", "b", ttl=TTL, bucket=BUCKET, replicas=3),
    }
    taken: dict[str, float] = {}
    try:
        await reset_jetstream(holders)
        for lease in leases.values():
            await lease.start()
        assert leases["holder-near"].is_leader and leases["holder-far"].is_leader
        start = leases["holder-far"].revision
        await eventually(lambda: leases["holder-far"].revision >= start + 2, within=4 * TTL, what="renewals")
        await holders.close()  # both holders' connection closes, as after a kill -9
        closed = time.monotonic()

        async def standbys_lead() -> bool:
            for name in ("near", "far"):
                if name not in taken and leases[name].is_leader:
                    taken[name] = time.monotonic() - closed
            return len(taken) == 2

        await eventually(standbys_lead, within=3 * TTL, what="both standbys leading", interval=0.01)
        assert taken["near"] <= fast_failover(TTL) + SLACK_S, taken
        earliest = 0.85 * TTL - TTL / 4 - 0.1  # the holder's last renewal came before the close
        assert earliest <= taken["far"] <= worst_failover(TTL) + SLACK_S, taken
    finally:
        for lease in leases.values():
            await lease.stop(release=False)
        for bus in (holders, near, far):
            await bus.close()
