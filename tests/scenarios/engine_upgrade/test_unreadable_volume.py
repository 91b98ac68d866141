"""Issue 17's must-show, through the whole stack: one Volume that does not decode, next to 100
good ones. It lands in LH_DEAD with the decoder's message and is reported blocked (`unreadable`)
by the engine-upgrade service's explain, and nothing patches it; the 100 reach LH_OBJECTS and
move to the new default engine image, never more than the limit per owner node at a time.
"""

from __future__ import annotations

from typing import Any

import pytest

from corral_bus import Bus
from corral_engine_upgrade.reasons import Reason
from corral_model.envelopes import EventType
from corral_model.subjects import object_subject
from corral_sandbox.seeds import Seed, default_seed, resized
from corral_sandbox.simulator import objects as lh_objects
from tests.fixtures.sandbox import DEFAULT_IMAGE, GROUP, UPGRADE_IMAGE, Sandbox
from tests.integration.watcher.support import dead_letters, last_per_subject, stream_history
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import DEFAULT_SETTING, LIMIT_SETTING, Observer

pytestmark = pytest.mark.scenario

BROKEN = "pvc-broken"
GOOD = 100
LIMIT = 3


@pytest.fixture
def sandbox_seed() -> Seed:
    """Three nodes, 100 volumes (half attached) on the v1.10.0 engine image."""
    return resized(default_seed(), nodes=3, volumes=GOOD)


def broken_volume(namespace: str) -> dict[str, Any]:
    """A detached volume on the old image, owned by node-1: an offline-upgrade candidate if corral
    could read it, but its numberOfReplicas is a string."""
    body = lh_objects.volume(BROKEN, namespace, image=DEFAULT_IMAGE, replicas=2)
    body["spec"]["numberOfReplicas"] = "three"
    body["status"] = {
        "state": "detached",
        "robustness": "unknown",
        "currentImage": DEFAULT_IMAGE,
        "ownerID": "node-1",
    }
    return body


async def test_an_unreadable_volume_is_parked_and_blocked_while_100_upgrade(
    sandbox: Sandbox, bus: Bus, stack: list[Running]
) -> None:
    _, _, engine_upgrade = stack
    good = {v["metadata"]["name"] for v in await sandbox.list("volumes")}
    assert len(good) == GOOD
    # Written as it is (status included, no admission), as a buggy client or a restore could.
    sandbox.emulator.load(GROUP, "volumes", [broken_volume(sandbox.namespace)])

    async def parked() -> list[str] | None:
        letters = [d for d in await dead_letters(bus) if d.name == BROKEN]
        return [d.reason for d in letters] or None

    reasons = await sandbox.wait_for(parked, within=30, what=f"{BROKEN} in LH_DEAD")
    assert all(r.startswith("undecodable: ") and "numberOfReplicas" in r for r in reasons)

    async def explained() -> str | None:
        assert engine_upgrade.runner is not None
        by_name = {e.name: e for e in engine_upgrade.runner.decider.explain()}
        held = by_name.get(BROKEN)
        return held.reason if held is not None else None

    assert await sandbox.wait_for(explained, within=30, what=f"{BROKEN} explained") == Reason.UNREADABLE

    # The wave: a new default engine image, automatic upgrade on.
    await sandbox.deploy_engine_image(UPGRADE_IMAGE, within=30)
    await sandbox.set_setting(DEFAULT_SETTING, UPGRADE_IMAGE)
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, str(LIMIT))
    await sandbox.wait_for(
        lambda: observer.all_on(UPGRADE_IMAGE, good),
        within=180,
        interval=0.1,
        what=f"the {GOOD} good volumes on {UPGRADE_IMAGE}",
        invariant=observer.limit_holds(LIMIT),
    )

    broken = await sandbox.get("volumes", BROKEN)
    assert broken["spec"]["image"] == DEFAULT_IMAGE  # never patched
    assert engine_upgrade.runner is not None
    [held] = [e for e in engine_upgrade.runner.decider.explain() if e.name == BROKEN]
    assert held.reason is Reason.UNREADABLE and "numberOfReplicas" in held.detail

    last = last_per_subject(await stream_history(bus, "lh.obj.volume.>"))
    assert last[object_subject("volume", sandbox.namespace, BROKEN)].type is EventType.UNREADABLE
    for name in good:
        event = last[object_subject("volume", sandbox.namespace, name)]
        assert event.type in (EventType.ADDED, EventType.MODIFIED) and event.object is not None
        assert event.object["spec"]["image"] == UPGRADE_IMAGE
    # one dead letter per version of it (the sandbox's Longhorn added its finalizer: a second one)
    versions = [d.resource_version for d in await dead_letters(bus) if d.name == BROKEN]
    assert len(versions) == len(set(versions)) >= 1
    assert versions[-1] == broken["metadata"]["resourceVersion"]

    # Deleted (its finalizer released by hand: no Longhorn controller can read it to do so), it
    # leaves the bus (a tombstone) and the service's view.
    await sandbox.delete("volumes", BROKEN)
    await sandbox.patch("volumes", BROKEN, {"metadata": {"finalizers": []}})

    async def buried() -> bool:
        last = last_per_subject(await stream_history(bus, "lh.obj.volume.>"))
        assert engine_upgrade.runner is not None
        gone = all(e.name != BROKEN for e in engine_upgrade.runner.decider.explain())
        return last[object_subject("volume", sandbox.namespace, BROKEN)].type is EventType.DELETED and gone

    await sandbox.wait_for(buried, within=30, what=f"{BROKEN} deleted on the bus and in the view")
    # The simulator, playing Longhorn, could not read it either: that was the point, not its bug.
    errors = sandbox.simulator.object_errors
    errors[:] = [e for e in errors if BROKEN not in e]
