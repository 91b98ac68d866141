"""The crash test against real processes: v2-upgrade killed with SIGKILL the instant each state of
either machine is reached, restarted, and left to finish.

The in-process test (tests/unit/v2_upgrade/test_crash.py, whose file name this one must not share:
the suite imports test modules by path, and two of one name clash) drops a decider's pass; this one kills
the service's process in the sandbox, where the data plane is the simulator's and every write goes
through the actuator. The kill is fired inside the API server by the write that enters the state
(crash.StateTrap), so the service never sees the state it reached: its successor (same instance,
new process, once the dead one's lease expired) must pick up from the CRs alone. The watcher and
the actuator run in this loop as in every v2 scenario (conftest.py); only v2-upgrade is a process.

Each run: the upgrade completes ("3 of 3 nodes upgraded"), the scenario invariants hold at every
write throughout (observer.py), and nothing a restart must not repeat happened twice: one
NodeDataEngineUpgrade per node (no second node started), one snapshot per volume and node upgrade
(snapshot-before-upgrade on), one v2 instance-manager delete per node.

Each run takes 15-30 s on a shared machine (two start-ups of the service, about 6 s each, and a
three-node upgrade), so `make test` runs the three that guard the three writes a restart must not
repeat (killed as a node upgrade is created: no second node started; in initializing, where the
snapshots are taken; in upgrading-instance-manager, where the IM is deleted); the other eight are
under the `chaos` marker (`pytest -m chaos`), with the suite's other kill -9 tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from corral_bus import Bus
from corral_v2_upgrade.states import MANAGER_STEPS, NODE_STEPS
from tests.chaos.stack import Replica
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.engine_upgrade.conftest import actuator
from tests.scenarios.v2_upgrade.conftest import watcher
from tests.scenarios.v2_upgrade.crash import StateTrap, WriteTally, v2_upgrade_process
from tests.scenarios.v2_upgrade.observer import UpgradeObserver
from tests.scenarios.v2_upgrade.scenario import NODES, manager, node_upgrades, start_upgrade, state

pytestmark = [pytest.mark.integration, pytest.mark.scenario]

ALWAYS = {("node", ""), ("node", "initializing"), ("node", "upgrading-instance-manager")}
"""The cases `make test` runs; the rest are `chaos`."""
CASES = [
    pytest.param(machine, str(state), id=f"{machine}-{state or 'created'}", marks=marks)
    for machine, steps in (("manager", MANAGER_STEPS), ("node", NODE_STEPS))
    for state in steps
    for marks in [() if (machine, str(state)) in ALWAYS else (pytest.mark.chaos,)]
]
"""Both machines' non-terminal states; "" is the CR's creation, before anything was decided on it."""

SETTINGS: dict[str, Any] = {
    "snapshot_before_upgrade": True,
    # A dead leader's lease runs out in a second; commands it left unanswered are presumed lost
    # after a few, a refused one is tried again after one (not the deployed minutes).
    "lease_ttl_s": 1.0,
    "command_ttl_s": 5.0,
    "applied_ttl_s": 5.0,
    "retry_backoff_s": 1.0,
}


@pytest.fixture
async def stack(
    sandbox: Sandbox, bus: Bus, nats_server: NatsServer, observer: UpgradeObserver
) -> AsyncIterator[list[Running]]:
    """The watcher and the actuator in this loop; v2-upgrade is the test's own process."""
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    services = [watcher(kubeconfig, nats_server.url), actuator(kubeconfig, nats_server.url)]
    try:
        await eventually(lambda: all(s.ready for s in services), within=120, what="watcher and actuator")
        yield services
    finally:
        for service in reversed(services):
            await service.stop()
    await observer.holds()


async def ready(process: Replica, http: aiohttp.ClientSession) -> None:
    await eventually(lambda: process.ready(http), within=120, what=f"{process.instance} ready", interval=0.05)


async def killed_and_restarted(
    sandbox: Sandbox,
    nats_server: NatsServer,
    observer: UpgradeObserver,
    log_dir: Path,
    trap: Callable[[Callable[[str], None]], StateTrap],
    after_kill: Callable[[], None] = lambda: None,
    **settings: Any,
) -> dict[str, Any]:
    """Start v2-upgrade and the upgrade; SIGKILL the service when `trap` springs, call `after_kill`,
    start it again and return the manager once it finished (invariants judged all along)."""
    kubeconfig = str(sandbox.cluster.kubeconfig_path)
    process = v2_upgrade_process(kubeconfig, nats_server.url, log_dir, **{**SETTINGS, **settings})
    killed = asyncio.Event()

    def kill(name: str) -> None:
        process.kill()
        killed.set()

    trapped = trap(kill)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as http:
        try:
            await process.start()
            await ready(process, http)
            await start_upgrade(sandbox)

            async def fired() -> bool:
                return killed.is_set()

            await sandbox.wait_for(
                fired,
                within=60,
                what=f"the {trapped.machine} reaching {trapped.field} {trapped.state!r}",
                invariant=observer.holds,
            )
            # Reaped, not killed again: a second kill() polls the dead child first (Popen.send_signal)
            # and can reap it before asyncio's child watcher, which then reports returncode 255.
            assert process.process.proc is not None
            assert await process.process.proc.wait() == -9
            after_kill()
            await process.start()  # the container restarted in its pod: same instance, new process

            async def finished() -> dict[str, Any] | None:
                found = await manager(sandbox)
                return found if state(found) in ("completed", "error") else None

            final: dict[str, Any] = await sandbox.wait_for(
                finished, within=90, what="the upgrade to finish", interval=0.05, invariant=observer.holds
            )
        finally:
            await process.process.stop()
    assert trapped.caught
    return final


@pytest.mark.parametrize(("machine", "state_"), CASES)
async def test_killed_in_a_state_it_resumes_and_finishes(
    machine: str,
    state_: str,
    sandbox: Sandbox,
    nats_server: NatsServer,
    stack: list[Running],
    observer: UpgradeObserver,
    tmp_path: Path,
) -> None:
    tally = WriteTally(sandbox.emulator)
    final = await killed_and_restarted(
        sandbox,
        nats_server,
        observer,
        tmp_path,
        lambda kill: StateTrap(sandbox.emulator, machine, state_, kill),
    )
    assert state(final) == "completed", final["status"]
    assert final["status"]["message"] == f"{len(NODES)} of {len(NODES)} nodes upgraded"
    assert tally.repeated() == []
    assert tally.node_upgrades == dict.fromkeys(NODES, 1)
    assert tally.im_deletes == dict.fromkeys(NODES, 1)
    upgrades = await node_upgrades(sandbox)
    assert sorted(u["spec"]["nodeID"] for u in upgrades) == sorted(NODES)
    assert all(state(u) == "completed" for u in upgrades), [u["status"] for u in upgrades]
    # One snapshot per attached volume a node upgrade listed, each taken once.
    listed = {(u["metadata"]["name"], v) for u in upgrades for v in (u["status"].get("volumes") or {})}
    assert set(tally.snapshots) <= listed
    assert tally.snapshots, "snapshot-before-upgrade took no snapshot"


@pytest.mark.chaos
async def test_killed_as_an_abort_starts_it_restores_retries_and_finishes(
    sandbox: Sandbox,
    nats_server: NatsServer,
    stack: list[Running],
    observer: UpgradeObserver,
    tmp_path: Path,
) -> None:
    """The abort-and-restore path: node-1's relocation is stuck (node-2 stalled as a target), its
    attempt times out, and the service dies at the write that starts the abort. Its successor
    restores the volumes, fails the attempt once, and (the stall lifted) the retry upgrades
    node-1: two node upgrades for node-1, one for the others, one IM delete per node."""
    sandbox.simulator.faults.block_target("node-2")
    tally = WriteTally(sandbox.emulator)
    final = await killed_and_restarted(
        sandbox,
        nats_server,
        observer,
        tmp_path,
        lambda kill: StateTrap(sandbox.emulator, "node", "timeout", kill, field="abortReason"),
        after_kill=lambda: sandbox.simulator.faults.unblock_target("node-2"),
        node_timeout_s=8.0,  # the restart (about 6 s) fits in the restore's own timeout
    )
    assert state(final) == "completed", final["status"]
    assert final["status"]["message"] == f"{len(NODES)} of {len(NODES)} nodes upgraded"
    assert final["status"]["upgradeNodes"]["node-1"]["retries"] == 1
    assert tally.repeated() == ["2 NodeDataEngineUpgrades created for node-1"]
    assert tally.node_upgrades == {"node-1": 2, "node-2": 1, "node-3": 1}
    assert tally.im_deletes == dict.fromkeys(NODES, 1)
    first, second = await node_upgrades(sandbox, "node-1")
    assert (state(first), first["status"].get("abortReason")) == ("error", "timeout"), first["status"]
    assert first["status"]["message"].endswith("; restored"), first["status"]
    assert state(second) == "completed", second["status"]
