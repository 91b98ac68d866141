"""Simulator conformance SC-11 (after SC-01..SC-10 of acceptance-scenarios.md §6): an engine upgrade
stays right while the API server refuses writes.

Issue 17's control run: no corral, `spec.image` set once by hand through the API on live and offline
volumes, 409s injected on the writes — and the simulated Longhorn itself piled up replicas (7 and 9
live against 3 wanted). Longhorn's controllers are level-triggered, so a refused write only delays
them; here the same upgrade runs with 409, then 429, then 500 answered to a share of every kind of
write (creates, patches, status patches, deletes, every resource), and at every observation no volume
may hold more than twice the replicas it wants (the old set plus the new one of a live upgrade). At
the end every volume has exactly its replicas, all on the new image.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox
from tests.integration.simulator.test_conformance import (
    attached_healthy,
    deployed_engine_image,
    detached,
    images_of,
)

# name → (replicas, node it is attached to; "" = detached: an offline upgrade)
VOLUMES = {"live-3": (3, "node-1"), "live-2": (2, "node-2"), "off-3": (3, ""), "off-2": (2, "")}
FAULT_RATE = 0.4
INJECTED = {"conflict_rate": 409, "throttle_rate": 429, "error_rate": 500}


class ReplicaBound:
    """Follows every version of every replica a watch delivered (`Sandbox.recording`) and checks, after
    each one, that no volume has more than twice its wanted replicas alive (no deletionTimestamp)."""

    def __init__(self, seen: list[dict[str, Any]]) -> None:
        self._seen = seen
        self._read = 0
        self._latest: dict[str, dict[str, Any]] = {}
        self.highest = dict.fromkeys(VOLUMES, 0)

    def check(self) -> None:
        while self._read < len(self._seen):
            replica = self._seen[self._read]
            self._read += 1
            self._latest[replica["metadata"]["name"]] = replica
            volume = replica["spec"]["volumeName"]
            alive = sum(
                1
                for r in self._latest.values()
                if r["spec"]["volumeName"] == volume and not r["metadata"].get("deletionTimestamp")
            )
            self.highest[volume] = max(self.highest[volume], alive)
            wanted = VOLUMES[volume][0]
            assert alive <= 2 * wanted, f"{volume}: {alive} live replicas against {wanted} wanted"


async def until_accepted(sandbox: Sandbox, write: Callable[[], Awaitable[Any]], what: str) -> None:
    """An operator's write, repeated while the API server answers it with the injected refusal."""

    async def attempt() -> bool:
        try:
            await write()
        except client.ApiException as error:
            if error.status in INJECTED.values():
                return False
            raise
        return True

    await sandbox.wait_for(attempt, what=what)


async def upgraded(sandbox: Sandbox, name: str) -> bool:
    wanted, node = VOLUMES[name]
    volume = await sandbox.get("volumes", name)
    replicas = [r for r in await sandbox.replicas_of(name) if not r["metadata"].get("deletionTimestamp")]
    engine = await sandbox.engine_of(name)
    running_image = UPGRADE_IMAGE if node else ""  # a detached volume's replicas run nothing
    return (
        images_of(volume) == (UPGRADE_IMAGE, UPGRADE_IMAGE)
        and (attached_healthy(volume) if node else detached(volume))
        and len(replicas) == wanted
        and all(r["spec"].get("active") is True for r in replicas)
        and all(images_of(r) == (UPGRADE_IMAGE, running_image) for r in replicas)
        and images_of(engine) == (UPGRADE_IMAGE, running_image)
        and not engine["spec"].get("upgradedReplicaAddressMap")
    )


@pytest.mark.parametrize("knob", list(INJECTED))
async def test_sc11_engine_upgrade_under_write_faults_never_doubles_replicas(
    sandbox: Sandbox, knob: str
) -> None:
    """SC-11: the control run of issue 17, with 409, 429 or 500 on 40 % of every kind of write."""
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    for name, (replicas, node) in VOLUMES.items():
        await sandbox.create_volume(name, replicas=replicas)
        await sandbox.wait_volume(name, detached, what=f"{name} created")
        if node:
            await sandbox.patch("volumes", name, {"spec": {"nodeID": node}})
            await sandbox.wait_volume(name, attached_healthy, what=f"{name} attached")
    assert all(images_of(v) == (DEFAULT_IMAGE, DEFAULT_IMAGE) for v in await sandbox.list("volumes"))

    async with sandbox.recording("replicas") as seen:
        bound = ReplicaBound(seen)
        sandbox.emulator.faults.update({knob: FAULT_RATE, "seed": 17})
        refused_before = sandbox.simulator.write_errors
        for name in VOLUMES:

            async def set_image(name: str = name) -> None:
                await sandbox.patch("volumes", name, {"spec": {"image": UPGRADE_IMAGE}})

            await until_accepted(sandbox, set_image, f"spec.image of {name} set")

        async def all_upgraded() -> bool:
            return all([await upgraded(sandbox, name) for name in VOLUMES])

        async def bounded() -> None:
            bound.check()

        await sandbox.wait_for(all_upgraded, within=30, what="every volume upgraded", invariant=bounded)
        refused = sandbox.simulator.write_errors - refused_before
        sandbox.emulator.faults.reset()
        # the watch trails the reads: wait until it delivered the end state, then check all of it
        final = {r["metadata"]["name"] for r in await sandbox.list("replicas")}

        async def caught_up() -> bool:
            bound.check()
            return final <= {r["metadata"]["name"] for r in seen}

        await sandbox.wait_for(caught_up, what="the replica watch caught up")
    assert refused > 0, "the simulator met the injected refusals"
    # the live volumes did have their new replicas beside the old ones at some point
    assert bound.highest["live-3"] == 6 and bound.highest["live-2"] == 4, bound.highest
