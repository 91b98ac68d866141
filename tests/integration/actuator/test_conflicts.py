"""A 409 Conflict on a patch whose preconditions still hold is retried within the command.

Conflicts come from the emulator's fault injection (a share of writes answered 409 before they are
looked at) or from a validating hook answering 409; the emulator's write log says what reached the
cluster, `Actuator.conflict_retries` how often a patch was sent again.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from corral_actuator.conflicts import ConflictRetry
from corral_model.envelopes import Outcome
from corral_sandbox.emulator import Emulator
from tests.integration.actuator.conftest import (
    DEFAULT_IMAGE,
    NS,
    OLD_IMAGE,
    MakeActuator,
    seed_cluster,
    upgrade,
    volume,
)

pytestmark = pytest.mark.integration

FAST = ConflictRetry(attempts=12, wait_initial=0.001, wait_max=0.005, wait_jitter=0.001)


def image_of(emulator: Emulator, name: str) -> Any:
    obj = emulator.get("longhorn.io", "volumes", NS, name)
    assert obj is not None
    return obj["spec"]["image"]


def changed_writes(emulator: Emulator) -> int:
    return sum(1 for r in emulator.write_log.records(plural="volumes") if r.changed and not r.dry_run)


async def test_conflicts_with_preconditions_holding_are_retried_and_applied(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator, volumes=10)
    emulator.faults.update({"conflict_rate": 0.6, "plurals": ["volumes"], "seed": 3})
    actuator = make_actuator(conflict_retry=FAST)
    results = [await actuator.execute(upgrade(f"vol-{i}")) for i in range(10)]
    assert [r.outcome for r in results] == [Outcome.APPLIED] * 10, [r.detail for r in results]
    assert actuator.conflict_retries >= 5, "most volumes met at least one conflict"
    assert actuator.api.retries == 0, "a conflict is not a transient error for stamina"
    assert changed_writes(emulator) == 10
    assert {image_of(emulator, f"vol-{i}") for i in range(10)} == {DEFAULT_IMAGE}


async def test_each_retry_is_reported_against_the_issuing_service(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator, volumes=1)
    emulator.faults.update({"conflict_rate": 0.6, "plurals": ["volumes"], "seed": 3})
    counted: list[str] = []
    actuator = make_actuator(conflict_retry=FAST, on_conflict_retry=lambda c: counted.append(c.service))
    result = await actuator.execute(upgrade("vol-0"))
    assert result.outcome is Outcome.APPLIED, result.detail
    assert counted and counted == ["engine-upgrade"] * actuator.conflict_retries


async def test_a_persistent_conflict_is_reported_after_the_retries(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    emulator.faults.update({"conflict_rate": 1.0, "plurals": ["volumes"]})
    actuator = make_actuator(conflict_retry=ConflictRetry(attempts=2, wait_initial=0.001, wait_jitter=0))
    result = await actuator.execute(upgrade("vol-0"))
    # Not a judgement of the command (its preconditions held): the server failed the write.
    assert result.outcome is Outcome.ERROR
    # An engine upgrade is written on the volume as read and judged (engine_upgrade_guard.py).
    assert result.detail.startswith("conflict persisted through 2 retries: HTTP 409"), result.detail
    assert actuator.conflict_retries == 2
    assert actuator.api.retries == 0
    assert image_of(emulator, "vol-0") == OLD_IMAGE


async def test_no_retries_configured_reports_the_first_conflict(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    emulator.faults.update({"conflict_rate": 1.0, "plurals": ["volumes"]})
    actuator = make_actuator(conflict_retry=ConflictRetry(attempts=0))
    result = await actuator.execute(upgrade("vol-0"))
    assert result.outcome is Outcome.ERROR
    assert result.detail.startswith("conflict persisted through 0 retries: HTTP 409"), result.detail
    assert actuator.conflict_retries == 0
    # The two settings the rules read, one patch (judged on the actuator's informer of the volumes,
    # whose list and watch are not write-path requests), one read.
    assert actuator.api.requests == 4
    assert image_of(emulator, "vol-0") == OLD_IMAGE


async def test_conflicts_do_not_let_a_stale_command_through(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    seed_cluster(emulator)
    emulator.load("longhorn.io", "volumes", [volume("vol-0", image="someone/else:v9")])
    emulator.faults.update({"conflict_rate": 1.0, "plurals": ["volumes"]})
    actuator = make_actuator(conflict_retry=FAST)
    result = await actuator.execute(upgrade("vol-0"))
    assert result.outcome is Outcome.PRECONDITION_FAILED
    assert result.detail == "/spec/image: another value, not what the command expected"
    assert actuator.conflict_retries == 0
    assert image_of(emulator, "vol-0") == "someone/else:v9"


async def test_a_precondition_broken_by_the_conflicting_write_is_refused(
    emulator: Emulator, make_actuator: MakeActuator
) -> None:
    """The write our patch lost to changed the very field it tests: the fresh read shows it, and the
    command is refused with the field, not retried."""
    seed_cluster(emulator)
    conflicts = {"seen": 0}

    def race(operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
        if new is None or new["spec"]["image"] != DEFAULT_IMAGE:
            return None  # only our upgrade conflicts, not the racing write below
        conflicts["seen"] += 1
        # The racing writer lands right after our 409 is answered, before we can read again.
        asyncio.get_running_loop().call_soon(
            emulator.load, "longhorn.io", "volumes", [volume("vol-0", image="someone/else:v9")]
        )
        return "the object has been modified; please apply your changes to the latest version"

    emulator.register_admission("longhorn.io", "volumes", race, name="race.test", code=409)
    actuator = make_actuator(conflict_retry=FAST)
    result = await actuator.execute(upgrade("vol-0"))
    assert conflicts["seen"] == 1
    assert result.outcome is Outcome.PRECONDITION_FAILED
    assert result.detail == "/spec/image: another value, not what the command expected"
    assert actuator.conflict_retries == 0
    assert image_of(emulator, "vol-0") == "someone/else:v9"
