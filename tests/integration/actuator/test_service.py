"""The actuator service end to end: real NATS, the emulator over HTTP, the runtime harness.

Commands go in on LH_COMMANDS exactly as a decision service publishes them; what the actuator did is
read back from LH_RESULTS and LH_DEAD, and what reached the cluster from the emulator's write log.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from corral_bus import MSG_ID_HEADER, Bus
from corral_model import codec
from corral_model.envelopes import Command, Outcome
from corral_model.subjects import DEAD_STREAM, RESULTS_STREAM, command_subject
from corral_sandbox.emulator import Emulator
from tests.fixtures.nats import NatsServer, queued_commands
from tests.fixtures.processes import ServiceProcess, eventually, python_module
from tests.integration.actuator.conftest import NS, OLD_IMAGE, seed_cluster, upgrade, volume
from tests.integration.actuator.harness import (
    InProcessActuator,
    actuator_config,
    actuator_env,
    dead_letters,
    lease_holder,
    publish_command,
    results,
    stream_count,
)

pytestmark = pytest.mark.integration


def kubeconfig(emulator: Emulator) -> str:
    assert emulator.kubeconfig_path is not None
    return str(emulator.kubeconfig_path)


def changed_volume_patches(emulator: Emulator) -> Counter[str]:
    return Counter(
        r.name
        for r in emulator.write_log.records(plural="volumes", verb="patch")
        if r.changed and not r.dry_run
    )


async def drained(bus: Bus) -> bool:
    """LH_COMMANDS is a work queue: a command leaves it when the actuator acks it."""
    return await queued_commands(bus) == 0


async def test_outcomes_dead_letters_and_security_through_the_bus(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    seed_cluster(emulator, volumes=4)
    actuator = InProcessActuator(actuator_config(nats_server.url, kubeconfig(emulator), "a-1"))
    await actuator.start()
    try:
        good, stale, evil = (
            upgrade("vol-0"),
            upgrade("vol-1", expect="other:v0"),
            upgrade("vol-2", to="evil:x"),
        )
        missing = upgrade("vol-404")
        subject = command_subject("engine-upgrade", "volume", NS, "vol-3")
        await bus.js.publish(subject, b"this is not json", headers={MSG_ID_HEADER: "garbage-1"})
        future = codec.encode(good).replace(b"corral.command/v1", b"corral.command/v9")
        await bus.js.publish(subject, future, headers={MSG_ID_HEADER: "future-1"})
        for command in (good, stale, evil, missing):
            await publish_command(bus, command)
        # A command claiming to be engine-upgrade's, published on im-restart's subject: forged.
        forged = upgrade("vol-3")
        await bus.js.publish(
            command_subject("im-restart", "volume", NS, "vol-3"),
            codec.encode(forged),
            headers={MSG_ID_HEADER: forged.id},
        )

        async def all_answered() -> bool:
            return await stream_count(bus, RESULTS_STREAM) == 4 and await stream_count(bus, DEAD_STREAM) == 3

        await eventually(all_answered, what="4 results and 3 dead letters")
        outcomes = {r.command_id: r for r in await results(bus)}
        assert outcomes[good.id].outcome is Outcome.APPLIED and outcomes[good.id].resource_version
        assert outcomes[stale.id].outcome is Outcome.PRECONDITION_FAILED
        assert outcomes[evil.id].outcome is Outcome.REJECTED_BY_POLICY
        assert outcomes[missing.id].outcome is Outcome.NOT_FOUND
        # The forged one is no decision at all: dead-lettered, and no result under the id it claims.
        assert forged.id not in outcomes
        reasons = sorted(d.reason for d in await dead_letters(bus))
        assert reasons[0] == (
            "permanent: subject and payload disagree:"
            " service 'im-restart' in the subject but 'engine-upgrade' in the payload"
        )
        assert reasons[1].startswith("undecodable: not a JSON object")
        assert "unsupported schema version 'corral.command/v9'" in reasons[2]
        # Only the good command reached the cluster; nothing for the evil or the forged one.
        assert changed_volume_patches(emulator) == Counter({"vol-0": 1})
        assert not emulator.write_log.records(name="vol-2") and not emulator.write_log.records(name="vol-3")

        # The same command again (past JetStream's dedup: another msg id) is answered, not re-applied.
        await publish_command(bus, good, msg_id="again-1")
        await eventually(lambda: drained(bus), what="the repeat to be acked")
        assert await stream_count(bus, RESULTS_STREAM) == 4
        assert changed_volume_patches(emulator) == Counter({"vol-0": 1})
    finally:
        assert await actuator.stop() == 0


def burst(volumes: int, duplicates: int, stale: int, seed: int = 5) -> tuple[list[tuple[Command, str]], int]:
    """`volumes` distinct commands (the first `stale` with a stale precondition) plus `duplicates`
    repeats, shuffled: half of the repeats carry the command id as Nats-Msg-Id (JetStream drops
    them), half a fresh one (stored, so the actuator's own record must catch them).
    Returns (messages with their msg ids, how many JetStream should store)."""
    rng = random.Random(seed)
    distinct = [
        upgrade(f"vol-{i}", expect="other:v0") if i < stale else upgrade(f"vol-{i}") for i in range(volumes)
    ]
    repeats = [rng.choice(distinct) for _ in range(duplicates)]
    messages = [(c, c.id) for c in distinct]
    messages += [(c, c.id if k % 2 else f"dup-{k}") for k, c in enumerate(repeats)]
    rng.shuffle(messages)
    return messages, volumes + duplicates // 2


def seed_burst(emulator: Emulator, volumes: int) -> None:
    seed_cluster(emulator, volumes=0)
    emulator.load("longhorn.io", "volumes", [volume(f"vol-{i}") for i in range(volumes)])
    emulator.write_log.clear()


async def check_burst(bus: Bus, emulator: Emulator, volumes: int, stale: int, *, gated: bool = False) -> None:
    everything = await results(bus)
    found = [r for r in everything if r.service == "engine-upgrade"]
    # The only other results: the Events of an actuator process's own start-up upgrade gate.
    others = [r for r in everything if r.service != "engine-upgrade"]
    assert all(r.service == "upgrade-gate" and r.target.kind == "Event" for r in others), others
    assert all(r.outcome is Outcome.APPLIED for r in others), others
    if gated:  # `python -m corral_actuator` runs the live gate, whose Event the actuator then records
        events = emulator.list("", "events", NS)
        assert others and {e["reason"] for e in events} == {"PassedUpgradeCheck"}, events
    assert len(found) == volumes, "exactly one result per distinct command"
    assert len({r.command_id for r in found}) == volumes
    assert Counter(r.outcome for r in found) == {
        Outcome.APPLIED: volumes - stale,
        Outcome.PRECONDITION_FAILED: stale,
    }
    patches = changed_volume_patches(emulator)
    assert sum(patches.values()) == volumes - stale
    assert set(patches.values()) == {1}, "no volume written twice"
    assert set(patches) == {f"vol-{i}" for i in range(stale, volumes)}


async def test_burst_with_duplicates_and_stale_preconditions(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    volumes, duplicates, stale = 800, 200, 100  # 1 000 messages: 20 % repeats, 10 % stale
    messages, stored_expected = burst(volumes, duplicates, stale)
    seed_burst(emulator, volumes)
    actuator = InProcessActuator(
        actuator_config(nats_server.url, kubeconfig(emulator), "a-1", concurrency=32)
    )
    await actuator.start()
    try:
        stored = [await publish_command(bus, command, msg_id=msg_id) for command, msg_id in messages]
        assert sum(stored) == stored_expected  # JetStream's dedup window dropped half the repeats

        async def finished() -> bool:
            return await drained(bus) and await stream_count(bus, RESULTS_STREAM) >= volumes

        await eventually(finished, within=120, what="the burst to be applied")
        await check_burst(bus, emulator, volumes, stale)
    finally:
        assert await actuator.stop() == 0


async def test_crash_and_sigterm_mid_burst_lose_nothing_and_double_nothing(
    emulator: Emulator, bus: Bus, nats_server: NatsServer, tmp_path: Path
) -> None:
    """Three actuator processes (one leader, two warm standbys): the leader is SIGKILLed mid-burst,
    the next one to lead gets SIGTERM mid-burst, the third finishes. Exactly the expected writes."""
    volumes, duplicates, stale = 800, 200, 100
    messages, _ = burst(volumes, duplicates, stale, seed=11)
    seed_burst(emulator, volumes)
    for command, msg_id in messages:
        await publish_command(bus, command, msg_id=msg_id)
    assert await queued_commands(bus) == volumes + duplicates // 2

    async def results_at_least(n: int) -> bool:
        return await stream_count(bus, RESULTS_STREAM) >= n

    # Rate-limited so the burst lasts long enough to be interrupted twice.
    processes = {
        name: ServiceProcess(
            name,
            python_module("corral_actuator"),
            actuator_env(
                nats_server.url, kubeconfig(emulator), instance=name, qps=100, burst=10, concurrency=16
            ),
            tmp_path,
        )
        for name in ("first", "second", "third")
    }
    try:
        for process in processes.values():
            await process.start()
        await eventually(lambda: results_at_least(100), within=90, what="a leader to apply commands")
        crashed = await lease_holder(bus)
        assert crashed in processes
        await processes[
            crashed
        ].kill()  # SIGKILL: in-flight writes, unpublished results, unacked commands cut off
        done_at_kill = await stream_count(bus, RESULTS_STREAM)
        assert done_at_kill < volumes, "the burst was over before the kill"

        target = min(done_at_kill + 100, volumes - 150)
        await eventually(lambda: results_at_least(target), within=60, what="a standby to take over")
        stopped = await lease_holder(bus)
        assert stopped in processes and stopped != crashed
        assert await stream_count(bus, RESULTS_STREAM) < volumes, "the burst was over before SIGTERM"
        # SIGTERM: stop fetching, finish what is in hand, release the lease, exit 0.
        assert await processes[stopped].terminate() == 0, processes[stopped].output()

        async def finished() -> bool:
            return await drained(bus) and await results_at_least(volumes)

        await eventually(finished, within=120, what="the last actuator to finish the burst")
        assert await lease_holder(bus) not in (crashed, stopped)
        await check_burst(bus, emulator, volumes, stale, gated=True)
    finally:
        for process in processes.values():
            await process.stop()


async def test_one_active_actuator_and_a_warm_standby(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    seed_cluster(emulator, volumes=4)
    a = InProcessActuator(actuator_config(nats_server.url, kubeconfig(emulator), "a-1"))
    b = InProcessActuator(actuator_config(nats_server.url, kubeconfig(emulator), "b-1"))
    await a.start()
    await eventually(lambda: _true(a.is_leader), what="the first actuator to lead")
    await b.start()
    stopped: list[InProcessActuator] = []
    try:
        await publish_command(bus, upgrade("vol-0"))
        await eventually(lambda: drained(bus), what="vol-0 applied")
        assert a.is_leader and not b.is_leader
        assert await a.stop() == 0  # releases the lease: the standby takes over without waiting the TTL
        stopped.append(a)
        await eventually(lambda: _true(b.is_leader), within=10, what="the standby to take over")
        await publish_command(bus, upgrade("vol-1"))
        await eventually(lambda: drained(bus), what="vol-1 applied by the new leader")
        assert changed_volume_patches(emulator) == Counter({"vol-0": 1, "vol-1": 1})
    finally:
        for actuator in (a, b):
            if actuator not in stopped:
                await actuator.stop()


async def test_dry_run_mode_marks_results_and_stores_nothing(
    emulator: Emulator, bus: Bus, nats_server: NatsServer
) -> None:
    seed_cluster(emulator, volumes=1)
    actuator = InProcessActuator(actuator_config(nats_server.url, kubeconfig(emulator), "a-1", dry_run=True))
    await actuator.start()
    try:
        await publish_command(bus, upgrade("vol-0"))
        await eventually(lambda: _count_is(bus, 1), what="the dry-run result")
        [result] = await results(bus)
        assert result.outcome is Outcome.APPLIED and result.dry_run
        stored = emulator.get("longhorn.io", "volumes", NS, "vol-0")
        assert stored is not None and stored["spec"]["image"] == OLD_IMAGE
        assert [r.dry_run for r in emulator.write_log.records(plural="volumes")] == [True]
    finally:
        await actuator.stop()


async def _true(value: Any) -> bool:
    return bool(value)


async def _count_is(bus: Bus, n: int) -> bool:
    return await stream_count(bus, RESULTS_STREAM) == n
