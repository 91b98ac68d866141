"""The record of recent commands and the per-object locks of the runner."""

from __future__ import annotations

import asyncio

import pytest

from corral_actuator.locks import KeyedLocks
from corral_actuator.record import CommandRecord
from corral_model.envelopes import CommandResult, Outcome, Target


def _result(command_id: str, outcome: Outcome = Outcome.APPLIED) -> CommandResult:
    return CommandResult(
        command_id=command_id,
        service="s",
        target=Target(kind="Volume", namespace="n", name="v"),
        outcome=outcome,
    )


async def test_a_repeat_finds_the_recorded_result() -> None:
    record = CommandRecord(capacity=2)
    record.start("a")
    assert record.running("a") is not None
    record.finish(_result("a"))
    assert record.running("a") is None
    found = record.result("a")
    assert found is not None and found.command_id == "a"


async def test_oldest_results_are_forgotten_first() -> None:
    record = CommandRecord(capacity=2)
    for cid in ("a", "b"):
        record.start(cid)
        record.finish(_result(cid))
    assert record.result("a") is not None  # touching a makes b the oldest
    record.start("c")
    record.finish(_result("c"))
    assert record.result("b") is None
    assert record.result("a") is not None and record.result("c") is not None
    assert len(record) == 2


async def test_a_repeat_in_flight_waits_for_the_first() -> None:
    record = CommandRecord()
    record.start("a")
    future = record.running("a")
    assert future is not None
    with pytest.raises(RuntimeError):
        record.start("a")
    record.finish(_result("a", Outcome.PRECONDITION_FAILED))
    assert (await future).outcome is Outcome.PRECONDITION_FAILED


async def test_abandoned_commands_are_not_recorded() -> None:
    record = CommandRecord()
    record.start("a")
    future = record.running("a")
    record.abandon("a")
    assert future is not None and future.cancelled()
    assert record.result("a") is None and record.running("a") is None


async def test_keyed_locks_serialise_one_key_and_clean_up() -> None:
    locks = KeyedLocks()
    order: list[str] = []
    gate = asyncio.Event()

    async def work(key: str, tag: str, wait: bool) -> None:
        async with locks.hold(key):
            order.append(f"{tag}-in")
            if wait:
                await gate.wait()
            order.append(f"{tag}-out")

    first = asyncio.create_task(work("k", "1", True))
    await asyncio.sleep(0)
    second = asyncio.create_task(work("k", "2", False))
    other = asyncio.create_task(work("other", "3", False))
    await other
    assert order == ["1-in", "3-in", "3-out"]
    gate.set()
    await asyncio.gather(first, second)
    assert order[3:] == ["1-out", "2-in", "2-out"]
    assert len(locks) == 0


@pytest.mark.parametrize(
    "outcome",
    [
        Outcome.REJECTED_BY_POLICY,
        Outcome.PRECONDITION_FAILED,
        Outcome.NOT_FOUND,
        Outcome.ERROR,
        Outcome.EXPIRED,
    ],
)
async def test_only_what_was_applied_is_remembered(outcome: Outcome) -> None:
    """A refusal is judged again on every delivery: the facts may have changed since."""
    record = CommandRecord()
    record.start("a")
    future = record.running("a")
    record.finish(_result("a", outcome))
    assert future is not None and future.result().outcome is outcome  # a waiting repeat is told
    assert record.result("a") is None and len(record) == 0
