"""Slot idle time as the wave bench counts it (bench/wave_timeline.py): a freed slot waits until the
next start on its owner node, and only while that node still has volumes waiting."""

from __future__ import annotations

import pytest

from bench.wave_timeline import Refill, Upgrade, slot_idle, summary
from bench.wave_trace import BusTap, hops


def up(name: str, start: float, end: float, owner: str = "node-1") -> Upgrade:
    return Upgrade(name, owner, live=False, start=start, end=end)


def test_each_start_takes_the_oldest_freed_slot() -> None:
    wave = [up("a", 0.1, 1.0), up("b", 0.1, 2.0), up("c", 1.2, 3.0), up("d", 2.5, 4.0)]
    idle = slot_idle(wave, wave_start=0.0, limit=2)
    assert [(r.freed_by.volume, r.filled_by.volume) for r in idle.refills] == [("a", "c"), ("b", "d")]
    assert [r.idle_s for r in idle.refills] == pytest.approx([0.2, 0.5])
    assert idle.first_command == pytest.approx([0.1])
    assert idle.max_in_flight == {"node-1": 2}
    assert idle.overshoots == 0


def test_a_slot_freed_with_nothing_waiting_is_not_idle_time() -> None:
    wave = [up("a", 0.0, 1.0), up("b", 0.0, 5.0), up("c", 1.5, 2.0)]
    idle = slot_idle(wave, wave_start=0.0, limit=2)
    assert [r.idle_s for r in idle.refills] == pytest.approx([0.5])  # c's end and b's end: nobody waits


def test_nodes_are_separate_and_overshoot_is_counted() -> None:
    wave = [up("a", 0.0, 1.0, "n1"), up("b", 0.5, 1.0, "n1"), up("c", 0.0, 1.0, "n2")]
    idle = slot_idle(wave, wave_start=0.0, limit=1)
    assert idle.overshoots == 1
    assert idle.max_in_flight == {"n1": 2, "n2": 1}


def test_summary_in_ms() -> None:
    assert summary([0.1, 0.2, 0.3]) == {"count": 3, "p50": 200.0, "p99": 300.0, "max": 300.0, "mean": 200.0}
    assert summary([]) == {"count": 0}


def test_hops_split_a_refill_at_the_stored_event_and_the_command() -> None:
    # wave_trace.hops: the freeing event as LH_OBJECTS stored it, the command's createdAt, the
    # tap's sight of the command; the four hops add up to the idle time, command_to_patch to the
    # last two
    freed, filled = up("a", 0.0, 1.0), up("b", 1.25, 3.0)
    tap = BusTap("new")
    tap.on_image_stored["a"] = 1.01
    tap.commands["b"] = (1.05, 1.07)  # (createdAt, seen)
    split = hops([Refill(freed, filled), Refill(filled, up("c", 3.5, 4.0))], tap)  # c: no messages
    ms = {name: figures["p50"] for name, figures in split.items()}
    assert ms == pytest.approx(
        {
            "watcher_ms": 10.0,
            "decider_ms": 40.0,
            "publish_ms": 20.0,
            "actuator_ms": 180.0,
            "command_to_patch_ms": 200.0,
        }
    )
    assert sum(ms[h] for h in ("watcher_ms", "decider_ms", "publish_ms", "actuator_ms")) == pytest.approx(
        250.0
    )
    assert split["watcher_ms"]["count"] == 1
