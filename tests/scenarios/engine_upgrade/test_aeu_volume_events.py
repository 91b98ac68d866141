"""Status inside the cluster, through the whole stack: an operator with only `kubectl` sees each
Volume's automatic upgrade start, complete, or be blocked with the reason, as core/v1 Events the
actuator recorded in the emulator, one per transition."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from corral_sandbox.simulator import SimConfig
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING
from tests.scenarios.engine_upgrade.test_aeu import COMPAT, attached_on_compat

pytestmark = pytest.mark.scenario


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(live_upgrade_seconds=1.0)


async def volume_events(sandbox: Sandbox) -> list[Any]:
    answer = await sandbox.core.list_namespaced_event(sandbox.namespace)
    return [e for e in answer.items if e.involved_object.kind == "Volume"]


def by_volume(events: list[Any]) -> dict[tuple[str, str], Any]:
    return {(e.involved_object.name, e.reason): e for e in events}


async def test_volume_events_say_started_completed_and_blocked_once_each(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    await attached_on_compat(sandbox, ["vol-a", "vol-d"], replicas=3)
    await sandbox.patch("volumes", "vol-d", {"spec": {"numberOfReplicas": 4}})  # 4 replicas on 3 nodes
    await sandbox.wait_volume("vol-d", lambda v: v["status"].get("robustness") == "degraded", within=20)
    await sandbox.set_setting(LIMIT_SETTING, "2")

    async def reported(wanted: set[tuple[str, str]]) -> bool:
        return wanted <= set(by_volume(await volume_events(sandbox)))

    first = {("vol-a", "EngineUpgradeStarted"), ("vol-a", "EngineUpgradeCompleted")}
    first.add(("vol-d", "EngineUpgradeBlocked"))
    await sandbox.wait_for(lambda: reported(first), within=60, what="vol-a's upgrade and vol-d's block")
    events = by_volume(await volume_events(sandbox))
    started, completed = events["vol-a", "EngineUpgradeStarted"], events["vol-a", "EngineUpgradeCompleted"]
    assert started.type == "Normal" and started.message.startswith(
        f"automatic engine upgrade started (live): {COMPAT} -> {DEFAULT_IMAGE}"
    )
    assert completed.message == f"automatic engine upgrade completed: now on {DEFAULT_IMAGE}"
    blocked = events["vol-d", "EngineUpgradeBlocked"]
    assert blocked.type == "Warning"
    assert blocked.message == f"automatic engine upgrade to {DEFAULT_IMAGE} blocked: degraded"
    assert started.source.component == "corral-engine-upgrade"

    await sandbox.patch("volumes", "vol-d", {"spec": {"numberOfReplicas": 3}})  # healthy again
    second = {("vol-d", "EngineUpgradeStarted"), ("vol-d", "EngineUpgradeCompleted")}
    await sandbox.wait_for(lambda: reported(second), within=60, what="vol-d upgraded once healthy")
    # One Event per transition: no Event said twice, none counted more than once.
    final = await volume_events(sandbox)
    assert Counter((e.involved_object.name, e.reason) for e in final).most_common(1)[0][1] == 1
    assert all(e.count == 1 for e in final), [(e.involved_object.name, e.reason, e.count) for e in final]
    # Each names its Volume's uid: `kubectl describe volumes.longhorn.io` lists Events by uid.
    for event in final:
        volume = await sandbox.get("volumes", event.involved_object.name)
        assert event.involved_object.uid == volume["metadata"]["uid"], (
            event.involved_object.name,
            event.reason,
        )
