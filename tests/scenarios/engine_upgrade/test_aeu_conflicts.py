"""A wave through 409 Conflicts (issue 19 part 4): the actuator retries a conflicting patch whose
preconditions still hold within the command, so no volume is answered `precondition-failed` and
sent into engine-upgrade's retry backoff; the wave finishes within the time a wave takes anyway.

The conflicts come from a validating hook answering 409 to each volume's upgrade patch the first
times it arrives (a racing writer, deterministically): random fault injection would also slow the
simulator's own writes, and could miss the four patches altogether."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from corral_bus import Bus
from corral_model.envelopes import Outcome
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox
from tests.integration.actuator.harness import results
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer

pytestmark = pytest.mark.scenario

VOLUMES = {f"vol-{i}" for i in range(4)}
CONFLICTS_PER_VOLUME = 2  # within the actuator's default of 4 retries


async def test_a_wave_through_conflicts_has_no_precondition_failures(
    sandbox: Sandbox, bus: Bus, stack: list[Running]
) -> None:
    await sandbox.deploy_engine_image(UPGRADE_IMAGE, within=20)
    for i, name in enumerate(sorted(VOLUMES)):
        node = f"node-{1 + i % 2}"
        await sandbox.create(
            "volumes",
            lh_objects.volume(name, sandbox.namespace, image=UPGRADE_IMAGE, node_id=node, replicas=2),
        )

    async def attached() -> bool:
        volumes = await sandbox.list("volumes")
        healthy = [v for v in volumes if v.get("status", {}).get("robustness") == "healthy"]
        return len(healthy) == len(VOLUMES)

    await sandbox.wait_for(attached, within=20, what="every volume attached and healthy")
    observer = Observer(sandbox)
    conflicts: Counter[str] = Counter()

    def racing_writer(operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
        """Every upgrade patch loses the race to another writer the first times it is sent."""
        if old is None or new is None or new["spec"].get("image") != DEFAULT_IMAGE:
            return None
        if old["spec"].get("image") == DEFAULT_IMAGE:
            return None
        name = new["metadata"]["name"]
        if conflicts[name] >= CONFLICTS_PER_VOLUME:
            return None
        conflicts[name] += 1
        return "the object has been modified; please apply your changes to the latest version"

    sandbox.emulator.register_admission("longhorn.io", "volumes", racing_writer, name="race.test", code=409)
    await sandbox.set_setting(LIMIT_SETTING, "1")
    # Well under engine-upgrade's 120 s backoff: one refused volume would miss it.
    await sandbox.wait_for(
        lambda: observer.all_on(DEFAULT_IMAGE, VOLUMES),
        within=40,
        what="every volume on the default image through 409s",
        invariant=observer.limit_holds(1),
    )
    assert conflicts == {name: CONFLICTS_PER_VOLUME for name in VOLUMES}
    outcomes = [r.outcome for r in await results(bus) if r.service == "engine-upgrade"]
    assert Outcome.PRECONDITION_FAILED not in outcomes, outcomes
    assert outcomes.count(Outcome.APPLIED) >= len(VOLUMES)
    actuator = next(s for s in stack if s.name == "actuator")
    assert actuator.ctx is not None
    retried = actuator.ctx.metrics.get_sample_value(
        "corral_actuator_conflict_retries_total", {"service": "engine-upgrade"}
    )
    assert retried == CONFLICTS_PER_VOLUME * len(VOLUMES)
