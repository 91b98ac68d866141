"""A replica asked to stop reports `stopped` `instance_stop_seconds` after it was asked, as the watch
told the runner (Memory.stop_asked), not after the round that first read the request: a real
instance manager starts stopping a process when asked, and a round busy applying a hundred writes
reads a request up to a round late (the v2 bench's failing-replicas)."""

from __future__ import annotations

from dataclasses import replace

from corral_sandbox.simulator.config import SimConfig
from tests.unit.simulator.test_reconcile import grown, replicas_of

STOP_S = 1.0


def asked_to_stop(noted_at: float | None) -> str:
    """A settled world; one replica asked to stop at `now`, the watch's note of it at `noted_at`;
    one round 0.25 s later: the replica's reported state."""
    world = grown(replace(SimConfig(), instance_stop_seconds=STOP_S), ("vol-a", 3, "node-1"))
    name = replicas_of(world, "vol-a")[0]["metadata"]["name"]
    asked = world.now
    world.patch("replica", name, {"spec": {"desireState": "stopped"}})
    if noted_at is not None:
        world.memory.stop_asked[f"replica/{name}"] = noted_at
    world.now = asked + 0.25
    world.round()
    return str(world.get("replica", name)["status"]["currentState"])


def test_a_stop_is_timed_from_when_it_was_asked() -> None:
    state = asked_to_stop(noted_at=-0.8)  # asked 0.8 s before the settled world's clock
    assert state == "stopped"


def test_without_a_note_the_stop_is_timed_from_the_round_that_reads_it() -> None:
    state = asked_to_stop(noted_at=None)
    assert state != "stopped"


def test_a_note_never_moves_a_stop_later_than_the_round() -> None:
    state = asked_to_stop(noted_at=10.0)  # a note from a clock ahead: the round's time wins
    assert state != "stopped"
