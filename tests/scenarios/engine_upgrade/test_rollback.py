"""A way out for a stuck volume (issue 30, item 3) through the whole stack: the default image is a bad
one whose live upgrade stalls on `stuck-1` (the sandbox's bad-image profile); the old image stays
deployed and the upgrade never switches over, so Longhorn has a way out.

* By default the volume is named stuck "awaiting rollback approval"; the operator approves with
  `corral engine-upgrade rollback stuck-1`; spec.image goes back to the image it runs, an Event
  says so, the slot it held goes to the next volume, and it is not picked again for the bad image.
* With CORRAL_STUCK_ROLLBACK=auto it is rolled back as soon as it is named stuck, unasked.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from corral_bus import Bus
from corral_cli.commands.engine_upgrade import approve_rollback
from corral_engine_upgrade.records import ROLLBACK_APPROVED, ROLLED_BACK
from corral_engine_upgrade.rollback import AWAITING_APPROVAL, ROLLED_BACK_EVENT
from corral_engine_upgrade.stuck import STUCK_EVENT
from corral_sandbox.simulator import ImageProfile, SimConfig
from tests.fixtures.nats import NatsServer
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox, fast_config
from tests.fixtures.services import all_leading
from tests.scenarios.engine_upgrade.conftest import Running, actuator, engine_upgrade, watcher
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer
from tests.scenarios.engine_upgrade.test_aeu import COMPAT
from tests.scenarios.engine_upgrade.test_wave_guard import attached, detached_on_compat, events

pytestmark = pytest.mark.scenario

BAD = DEFAULT_IMAGE  # the default image is the bad one: its live upgrade stalls on stuck-1
STUCK_LIVE_S = 2.0


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(images={BAD: ImageProfile(stalls_on=frozenset({"stuck-1"}))})


async def running(sandbox: Sandbox, url: str, mode: str) -> AsyncIterator[list[Running]]:
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    decider = engine_upgrade(url, stuck_live_s=STUCK_LIVE_S, stuck_rollback=mode)
    services = [watcher(kubeconfig, url), actuator(kubeconfig, url), decider]
    async with all_leading(services):
        yield services


@pytest.fixture
async def stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    async for services in running(sandbox, nats_server.url, "approved"):
        yield services


@pytest.fixture
async def auto_stack(sandbox: Sandbox, bus: Bus, nats_server: NatsServer) -> AsyncIterator[list[Running]]:
    async for services in running(sandbox, nats_server.url, "auto"):
        yield services


async def one_stuck_one_waiting(sandbox: Sandbox) -> Observer:
    """stuck-1 attached and ok-1 detached, both on COMPAT and owned by node-1, the limit at 1: the
    live upgrade goes first (pick order) and stalls, holding node-1's one slot."""
    await attached(sandbox, {"stuck-1": "node-1"})
    await detached_on_compat(sandbox, ["ok-1"], owner="node-1")
    observer = Observer(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, "1")
    return observer


async def volume_event(sandbox: Sandbox, reason: str) -> Any:
    found = [e for e in await events(sandbox, "Volume", reason) if e.involved_object.name == "stuck-1"]
    return found[0] if found else None


async def rolled_back(sandbox: Sandbox) -> dict[str, Any] | None:
    """stuck-1 once rolled back (on COMPAT, as it was before its upgrade, but marked)."""
    volume = await sandbox.get("volumes", "stuck-1")
    marked = ROLLED_BACK in (volume["metadata"].get("annotations") or {})
    back = volume["spec"]["image"] == COMPAT and volume["status"].get("currentImage") == COMPAT
    return volume if back and marked else None


async def held_off_the_bad_image(sandbox: Sandbox, observer: Observer) -> None:
    """The slot stuck-1 held goes to ok-1; stuck-1 itself is not picked again for the bad image."""
    await sandbox.wait_for(
        lambda: observer.all_on(BAD, {"ok-1"}),
        within=60,
        what="ok-1 upgraded in the freed slot",
        invariant=observer.limit_holds(1),
    )

    async def on_compat() -> bool:
        return bool((await sandbox.get("volumes", "stuck-1"))["spec"]["image"] == COMPAT)

    await sandbox.stays(on_compat, 2.0, what="stuck-1 held off the bad image")


async def test_the_operator_approves_and_the_stuck_volume_goes_back_to_the_image_it_runs(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    observer = await one_stuck_one_waiting(sandbox)
    stuck = await sandbox.wait_for(
        lambda: volume_event(sandbox, STUCK_EVENT), within=60, what="stuck-1 named stuck"
    )
    assert AWAITING_APPROVAL in stuck.message and f"roll it back to {COMPAT}" in stuck.message
    assert await observer.images() == {"stuck-1": BAD, "ok-1": COMPAT}  # nothing without approval

    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    assert await approve_rollback(kubeconfig, sandbox.namespace, "stuck-1") == 0
    volume = await sandbox.wait_for(lambda: rolled_back(sandbox), within=60, what="stuck-1 rolled back")
    annotations = volume["metadata"]["annotations"]
    assert annotations[ROLLBACK_APPROVED] == BAD and annotations[ROLLED_BACK] == BAD
    event = await sandbox.wait_for(
        lambda: volume_event(sandbox, ROLLED_BACK_EVENT), within=30, what="the rollback's Event"
    )
    assert event.type == "Warning" and f"spec.image {BAD} -> {COMPAT}" in event.message
    assert "approved by the operator" in event.message
    await held_off_the_bad_image(sandbox, observer)


async def test_auto_rolls_the_stuck_volume_back_unasked(sandbox: Sandbox, auto_stack: list[Running]) -> None:
    observer = await one_stuck_one_waiting(sandbox)
    volume = await sandbox.wait_for(lambda: rolled_back(sandbox), within=60, what="stuck-1 rolled back")
    annotations = volume["metadata"]["annotations"]
    assert ROLLBACK_APPROVED not in annotations and annotations[ROLLED_BACK] == BAD
    event = await sandbox.wait_for(
        lambda: volume_event(sandbox, ROLLED_BACK_EVENT), within=30, what="the rollback's Event"
    )
    assert "automatic" in event.message and f"spec.image {BAD} -> {COMPAT}" in event.message
    stuck = await volume_event(sandbox, STUCK_EVENT)  # named stuck first, with its way out
    assert stuck is not None and f"to be rolled back to {COMPAT}" in stuck.message
    await held_off_the_bad_image(sandbox, observer)
