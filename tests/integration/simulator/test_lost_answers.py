"""A create the API server stored but whose answer never came back (a cut connection, a timeout): the
simulator looks the object up before its next round, so a replica named at random is not made again.

The simulator's watches are silenced for this (the emulator's `watch_cut_after_events=0` with
`watch_drop_silently`), so the only way it can learn of the stored replicas is that read-back: without
it every round makes a new set and the volume's replicas grow without end."""

from __future__ import annotations

from typing import Any

from corral_sandbox.simulator.view import Obj
from tests.fixtures.sandbox import Sandbox

REPLICAS = 3


async def test_a_create_whose_answer_was_lost_is_not_made_twice(sandbox: Sandbox) -> None:
    simulator = sandbox.simulator
    stored_but_unanswered: list[str] = []
    create = simulator.io.create

    async def answer_lost(kind: str, obj: Obj) -> Obj:
        stored = await create(kind, obj)
        if kind != "replica":
            return stored
        stored_but_unanswered.append(stored["metadata"]["name"])
        raise TimeoutError("the answer was lost on the way back")

    simulator.io.create = answer_lost  # type: ignore[method-assign]
    sandbox.emulator.faults.update({"watch_cut_after_events": 0, "watch_drop_silently": True})
    await sandbox.create_volume("vol-lost", replicas=REPLICAS)
    await simulator.sync()  # the silenced watches will not tell it of the new volume
    simulator.wake()

    def stored() -> list[dict[str, Any]]:
        return sandbox.emulator.list("longhorn.io", "replicas", label_selector="longhornvolume=vol-lost")

    async def never_made_twice() -> None:
        assert len(stored()) <= REPLICAS, [r["metadata"]["name"] for r in stored()]

    async def replicas_settled() -> list[dict[str, Any]] | None:
        replicas = stored()
        # the instance controller reports each replica stopped only in a round after it knew of it
        known = [r for r in replicas if (r.get("status") or {}).get("currentState") == "stopped"]
        return replicas if replicas and len(known) == len(replicas) else None

    replicas = await sandbox.wait_for(
        replicas_settled, what="the volume's replicas reported", invariant=never_made_twice
    )
    assert len(stored_but_unanswered) == REPLICAS, "every replica create lost its answer"
    assert len(replicas) == REPLICAS, [r["metadata"]["name"] for r in replicas]
