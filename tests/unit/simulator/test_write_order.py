"""The order a round's writes reach the API server: the instances' state reports first (a real
instance manager reports each process as it changes, not behind the volume controller's writes of
the same moment), each object's own writes in their order, a volume's status last."""

from __future__ import annotations

from typing import Any, cast

from kubernetes_asyncio import client

from corral_sandbox.simulator.runner import Simulator
from corral_sandbox.simulator.writes import Write


def stopped(kind: str, name: str) -> Write:
    return Write("status", kind, name, {"status": {"currentState": "stopped"}}, "stopped")


async def applied_order(writes: list[Write]) -> list[tuple[str, str, str]]:
    simulator = Simulator(cast("client.ApiClient", None))
    seen: list[tuple[str, str, str]] = []

    async def apply(write: Write) -> None:
        seen.append((write.verb, write.kind, write.name))

    cast("Any", simulator)._apply = apply
    await simulator._apply_all(writes)
    return seen


async def test_instance_reports_go_before_the_rounds_other_writes() -> None:
    writes = [
        Write("create", "replica", "vol-1-r-new", {"spec": {}}, "replenish"),
        Write("patch", "engine", "vol-1-e-0", {"spec": {"replicaAddressMap": {}}}, "drop replica"),
        Write("status", "volume", "vol-1", {"status": {"robustness": "degraded"}}, "degraded"),
        *(stopped("replica", f"vol-{i}-r-1") for i in range(1, 4)),
    ]

    order = await applied_order(writes)

    assert order[:3] == [("status", "replica", f"vol-{i}-r-1") for i in range(1, 4)]
    assert set(order[3:5]) == {("create", "replica", "vol-1-r-new"), ("patch", "engine", "vol-1-e-0")}
    assert order[-1] == ("status", "volume", "vol-1")


async def test_an_objects_writes_keep_their_order_when_one_is_a_report() -> None:
    """A replica created and started in one round: its report cannot go before its create."""
    writes = [
        Write("patch", "engine", "vol-1-e-0", {"spec": {"active": True}}, "other"),
        Write("create", "replica", "vol-1-r-2", {"spec": {}}, "replenish"),
        Write("status", "replica", "vol-1-r-2", {"status": {"currentState": "starting"}}, "starting"),
    ]

    order = await applied_order(writes)

    assert order == [
        ("create", "replica", "vol-1-r-2"),
        ("status", "replica", "vol-1-r-2"),
        ("patch", "engine", "vol-1-e-0"),
    ]


async def test_a_status_write_without_a_state_is_no_report() -> None:
    writes = [
        Write("status", "replica", "vol-1-r-1", {"status": {"rebuildProgress": 50}}, "progress"),
        stopped("engine", "vol-2-e-0"),
    ]

    assert await applied_order(writes) == [
        ("status", "engine", "vol-2-e-0"),
        ("status", "replica", "vol-1-r-1"),
    ]
