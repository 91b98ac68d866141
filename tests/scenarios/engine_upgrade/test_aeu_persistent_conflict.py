"""A 409 Conflict that outlasts the actuator's retries, on an object that never moved: the volume
is upgraded once the conflicts stop, after engine-upgrade's short error backoff (5 s), not its
120 s retry backoff, which waits for a fresher object that never comes.

This is the explorer's cell engine-upgrade/in-flight-live/api-409 made deterministic: there the
emulator answers 409 to half the writes from one seeded generator, so which write draws which
answer follows how the simulator's and the actuator's writes interleave (load shifts it), and
about 1 run in 11 all five writes of vol-b's upgrade drew a 409. The actuator reported
`precondition-failed`, so the decider held the volume until its view held a newer Volume; the
volume was idle, so it waited 120 s without an Event. Here a racing writer answers 409 to the
upgrade until the actuator has given up on it, then stops.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_bus import Bus
from corral_model.envelopes import CommandResult, Outcome
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox
from tests.integration.actuator.harness import results
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer

pytestmark = pytest.mark.scenario

VOLUME = "vol-0"
RECOVER_S = 30.0
"""Well under the 120 s retry backoff a refusal holds an unchanged volume for, and well over the
5 s error backoff plus a decision and a write on a loaded 2-core machine."""


async def _refused(bus: Bus) -> list[CommandResult]:
    return [
        r
        for r in await results(bus)
        if r.service == "engine-upgrade" and r.target.name == VOLUME and r.outcome is not Outcome.APPLIED
    ]


async def test_a_conflict_outlasting_the_retries_is_retried_soon_after_it_stops(
    sandbox: Sandbox, bus: Bus, stack: list[Running]
) -> None:
    await sandbox.deploy_engine_image(UPGRADE_IMAGE, within=20)
    await sandbox.create(
        "volumes",
        lh_objects.volume(VOLUME, sandbox.namespace, image=UPGRADE_IMAGE, node_id="node-1", replicas=2),
    )

    async def healthy() -> bool:
        volume = await sandbox.get("volumes", VOLUME)
        return bool(volume.get("status", {}).get("robustness") == "healthy")

    await sandbox.wait_for(healthy, within=20, what=f"{VOLUME} attached and healthy")
    racing = {"on": True, "conflicts": 0}

    def racing_writer(operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
        """The upgrade patch loses every race, without the object changing, while `on`."""
        if not racing["on"] or old is None or new is None:
            return None
        if new["spec"].get("image") != DEFAULT_IMAGE or old["spec"].get("image") == DEFAULT_IMAGE:
            return None
        racing["conflicts"] += 1
        return "the object has been modified; please apply your changes to the latest version"

    sandbox.emulator.register_admission("longhorn.io", "volumes", racing_writer, name="race.test", code=409)
    await sandbox.set_setting(LIMIT_SETTING, "1")

    async def gave_up() -> bool:
        return bool(await _refused(bus))

    await sandbox.wait_for(gave_up, within=30, what=f"the actuator giving up on {VOLUME}'s upgrade")
    racing["on"] = False
    [refusal] = await _refused(bus)
    # Every precondition held on the fresh reads: the decision was right and the server failed it.
    assert refusal.outcome is Outcome.ERROR, refusal
    assert refusal.detail.startswith("conflict persisted through 4 retries: HTTP 409"), refusal.detail
    assert racing["conflicts"] >= 2
    observer = Observer(sandbox)
    await sandbox.wait_for(
        lambda: observer.all_on(DEFAULT_IMAGE, {VOLUME}),
        within=RECOVER_S,
        what=f"{VOLUME} upgraded once the conflicts stopped",
    )
