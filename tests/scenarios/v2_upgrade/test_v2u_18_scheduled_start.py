"""V2U-18 (B): a scheduled start (acceptance-scenarios.md §5.4).

`spec.startTime` a few seconds ahead: the manager initialises, but no node upgrade exists before
that time; then the normal flow runs. Once the first node has started (`status.startedAt`),
moving `startTime` an hour ahead is ignored: the remaining nodes go on at once. Seconds of real
time on the service's own clock (its `startTime` is RFC 3339, second precision).
"""

from __future__ import annotations

import math
import time
from typing import Any

from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION
from corral_v2_upgrade.commands import rfc3339
from corral_v2_upgrade.step import parse_time
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.v2_upgrade import scenario
from tests.scenarios.v2_upgrade.invariants import MANAGERS, NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

AHEAD_S = 3


async def test_nothing_starts_before_the_start_time_and_a_later_change_is_ignored(
    sandbox: Sandbox, stack: list[Running], observer: UpgradeObserver
) -> None:
    start = math.ceil(time.time()) + AHEAD_S
    await scenario.start_upgrade(sandbox, start_time=rfc3339(start))

    async def waiting() -> dict[str, Any] | None:
        manager = await scenario.manager(sandbox)
        return manager if scenario.state(manager) == "upgrading" else None

    manager = await sandbox.wait_for(
        waiting, within=30, what="the manager upgrading", invariant=observer.holds
    )
    assert not manager["status"].get("startedAt")

    async def nothing_started() -> bool:
        await observer.holds()
        return not await scenario.node_upgrades(sandbox)

    await sandbox.stays(
        nothing_started, start - time.time() - 0.5, what="no node upgrade before the start time"
    )

    async def first_started() -> list[dict[str, Any]]:
        return await scenario.node_upgrades(sandbox)

    [first] = await sandbox.wait_for(
        first_started, within=30, what="the first node upgrade", invariant=observer.holds
    )
    created = parse_time(first["metadata"]["creationTimestamp"])
    assert created is not None and created >= start

    # once started, a new start time is ignored
    await sandbox.objects_api.patch_namespaced_custom_object(
        CORRAL_GROUP,
        CORRAL_VERSION,
        sandbox.namespace,
        MANAGERS,
        scenario.MANAGER,
        {"spec": {"startTime": rfc3339(time.time() + 3600)}},
        _content_type="application/merge-patch+json",  # type: ignore[call-arg]
    )
    manager = await scenario.wait_manager(sandbox, observer, "completed", within=90)
    started_at = parse_time(manager["status"]["startedAt"])
    assert started_at is not None and started_at >= start
    assert [u["spec"]["nodeID"] for u in observer.created(NODE_UPGRADES)] == list(scenario.NODES)
