"""Commands older than the actuator's max command age are refused as `expired` and not applied,
against the sandbox's API emulator over HTTP (its write log says what reached the cluster)."""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from corral_bus import Bus
from corral_model.envelopes import Command, CommandResult, Outcome, Target, Verb, new_command
from corral_sandbox.emulator import Emulator
from corral_upgradepath.decision import Check, GateDecision
from corral_upgradepath.startup import gate_event_commands
from tests.fixtures.nats import NatsServer, queued_commands
from tests.fixtures.processes import eventually
from tests.integration.actuator.conftest import (
    DEFAULT_IMAGE,
    NS,
    OLD_IMAGE,
    MakeActuator,
    seed_cluster,
    upgrade,
)
from tests.integration.actuator.harness import (
    InProcessActuator,
    actuator_config,
    publish_command,
    results,
)

pytestmark = pytest.mark.integration

NOW = 1_800_000_000.0
MAX_AGE = 30.0


def made_at(command: Command, created_at: float) -> Command:
    return msgspec.structs.replace(command, created_at=created_at)


def stored_volume(emulator: Emulator, name: str) -> dict[str, Any]:
    obj = emulator.get("longhorn.io", "volumes", NS, name)
    assert obj is not None
    return obj


def writes(emulator: Emulator) -> int:
    return sum(1 for r in emulator.write_log.records() if r.changed and not r.dry_run)


async def test_an_expired_command_is_refused_and_the_object_is_untouched(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    before = stored_volume(emulator, "vol-0")
    actuator = make_actuator(clock=lambda: NOW, max_command_age=MAX_AGE)
    result = await actuator.execute(made_at(upgrade("vol-0"), NOW - 45.0))
    assert result.outcome is Outcome.EXPIRED
    assert "created 45.0 s ago" in result.detail and "30 s" in result.detail
    assert result.resource_version == before["metadata"]["resourceVersion"]
    assert stored_volume(emulator, "vol-0") == before
    assert writes(emulator) == 0


async def test_a_command_within_the_max_age_is_applied(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    actuator = make_actuator(clock=lambda: NOW, max_command_age=MAX_AGE)
    for name, created in (("vol-0", NOW - 29.0), ("vol-1", NOW + 5.0)):  # + : the issuer's clock is ahead
        result = await actuator.execute(made_at(upgrade(name), created))
        assert result.outcome is Outcome.APPLIED, result.detail
        assert stored_volume(emulator, name)["spec"]["image"] == DEFAULT_IMAGE
    assert writes(emulator) == 2


async def test_a_command_without_created_at_has_no_age(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    actuator = make_actuator(clock=lambda: NOW, max_command_age=MAX_AGE)
    # created_at 0: no age known here (the runner's admission refuses it before; test_forged.py)
    result = await actuator.execute(upgrade("vol-0", created_at=0.0))
    assert result.outcome is Outcome.APPLIED, result.detail


async def test_max_age_zero_turns_expiry_off(emulator: Emulator, make_actuator: MakeActuator) -> None:
    seed_cluster(emulator)
    actuator = make_actuator(clock=lambda: NOW, max_command_age=0.0)
    result = await actuator.execute(made_at(upgrade("vol-0"), NOW - 3600.0))
    assert result.outcome is Outcome.APPLIED, result.detail


async def test_an_expired_command_whose_change_already_holds_is_reported_applied(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """A redelivery of a command written before a crash lost its ack: the write happened."""
    seed_cluster(emulator)
    command = upgrade("vol-0")
    assert (await make_actuator().execute(command)).outcome is Outcome.APPLIED
    emulator.write_log.clear()
    late = make_actuator(clock=lambda: NOW, max_command_age=MAX_AGE)
    result = await late.execute(made_at(command, NOW - 300.0))
    assert result.outcome is Outcome.APPLIED and "nothing written" in result.detail
    assert writes(emulator) == 0


async def test_an_expired_command_for_a_missing_object_is_not_found(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    actuator = make_actuator(clock=lambda: NOW, max_command_age=MAX_AGE)
    result = await actuator.execute(made_at(upgrade("vol-404"), NOW - 300.0))
    assert result.outcome is Outcome.NOT_FOUND


async def test_an_expired_delete_is_refused_without_a_write(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    command = new_command(
        service="engine-upgrade",
        verb=Verb.DELETE,
        target=Target(kind="Volume", namespace=NS, name="vol-0"),
        created_at=NOW - 300.0,
    )
    result = await make_actuator(clock=lambda: NOW, max_command_age=MAX_AGE).execute(command)
    # engine-upgrade may not delete volumes at all: the policy answers first, age second
    assert result.outcome is Outcome.REJECTED_BY_POLICY
    assert stored_volume(emulator, "vol-0")["spec"]["image"] == OLD_IMAGE
    assert writes(emulator) == 0


async def test_a_late_gate_event_is_still_recorded(emulator: Emulator, make_actuator: MakeActuator) -> None:
    """Events report what happened (the upgrade-path gate's, made with created_at = now), true
    however late: a service's gate Event waiting an hour for the actuator is still recorded."""
    seed_cluster(emulator)
    decision = GateDecision(
        allowed=False,
        current_version="v1.9.0",
        target_version="v1.11.0",
        reason="failed to upgrade since upgrading from v1.9.0 to v1.11.0 for minor version is not supported",
        check=Check.VERSION,
    )
    (event,) = gate_event_commands(decision, service="engine-upgrade", namespace=NS, now=NOW - 3600.0)
    assert event.created_at == NOW - 3600.0
    result = await make_actuator(clock=lambda: NOW, max_command_age=MAX_AGE).execute(event)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert emulator.get("", "events", NS, event.target.name) is not None


async def test_the_service_reports_an_expired_command_on_lh_results_and_acks_it(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    """Commands that waited in LH_COMMANDS while no actuator ran: the stale one is refused as
    `expired` (and leaves the queue), the fresh one is applied."""
    seed_cluster(emulator, volumes=2)
    now = time.time()
    stale, fresh = made_at(upgrade("vol-0"), now - 120.0), made_at(upgrade("vol-1"), now)
    for command in (stale, fresh):
        await publish_command(bus, command)
    assert emulator.kubeconfig_path is not None
    actuator = InProcessActuator(
        actuator_config(nats_server.url, str(emulator.kubeconfig_path), "a-1", max_command_age_s=30.0)
    )
    await actuator.start()
    try:

        async def both_answered() -> list[CommandResult]:
            found = await results(bus)
            return found if len(found) == 2 else []

        found = await eventually(both_answered, what="a result for each command")
        outcomes = {r.command_id: r.outcome for r in found}
        assert outcomes == {stale.id: Outcome.EXPIRED, fresh.id: Outcome.APPLIED}
        assert stored_volume(emulator, "vol-0")["spec"]["image"] == OLD_IMAGE
        assert stored_volume(emulator, "vol-1")["spec"]["image"] == DEFAULT_IMAGE

        async def drained() -> bool:
            return await queued_commands(bus) == 0

        await eventually(drained, what="both commands acked")
    finally:
        assert await actuator.stop() == 0
