"""What engine-upgrade's per-event cost is made of (issue 28, item 2): the volume Events costed side
by side with a decider that makes none, and a profile of the same stream.

Issue 28 found the per-event cost grown from 2.9 to 6.9 µs as Events, fencing and tracing hooks came
in. Fencing and tracing are the runner's, not the decider's (bench_tracing costs the runner); what
the decider pays per event beyond its rules is the Events it builds (announce.py: two per upgrade).
So two deciders, bootstrapped from the same events, one announcing and one not (`announce=False`,
the service's `volume_events` off), are given every burst of one stream, in turns (which one goes
first alternates, so neither always finds the caches warm): the difference is the Events' share,
measured under the same load. The announcing decider's commands drive the wave; the other decides
the same upgrades (its rules are the same), and its commands are dropped.

The profile is of a pass of its own (bench/profiles.py): the functions the announcing decider spent
its time in, each with its share.
"""

from __future__ import annotations

import cProfile
import statistics
import time
from typing import Any

from bench.profiles import top
from corral_engine_upgrade.core import EngineUpgradeDecider

BATCH = 50
ROUNDS = 5


def paired_stream(
    announcing: EngineUpgradeDecider, silent: EngineUpgradeDecider, wave: Any, events: int
) -> dict[str, float]:
    """`events` events of `wave` through both deciders, burst by burst; CPU per event of each (the
    median of ROUNDS rounds' means) and the Events' share of the announcing one's."""
    bursts = max(ROUNDS, events // BATCH)
    per_round = bursts // ROUNDS
    cpu = time.thread_time
    spent = {id(announcing): [0.0] * ROUNDS, id(silent): [0.0] * ROUNDS}
    counted = [0] * ROUNDS
    for number in range(bursts):
        batch = [wave.next() for _ in range(BATCH)]
        at = min(number // per_round, ROUNDS - 1)
        order = (announcing, silent) if number % 2 else (silent, announcing)
        made: list[Any] = []
        for decider in order:
            started = cpu()
            for event in batch:
                decider.apply(event)
            decided = decider.decide()
            spent[id(decider)][at] += cpu() - started
            if decider is announcing:
                made = decided
        counted[at] += len(batch)
        wave.started(made)
    on = statistics.median(s / n * 1e6 for s, n in zip(spent[id(announcing)], counted, strict=True))
    off = statistics.median(s / n * 1e6 for s, n in zip(spent[id(silent)], counted, strict=True))
    return {
        "per_event_cpu_us_with_events": round(on, 2),
        "per_event_cpu_us_without_events": round(off, 2),
        "events_share_of_per_event_cost": round((on - off) / on, 3) if on else 0.0,
    }


def profiled_stream(decider: EngineUpgradeDecider, wave: Any, events: int) -> list[dict[str, Any]]:
    """A profile of `events` more events of `wave`, applied and decided as the runner does."""
    profiler = cProfile.Profile()
    for _ in range(max(1, events // BATCH)):
        batch = [wave.next() for _ in range(BATCH)]
        profiler.enable()
        for event in batch:
            decider.apply(event)
        made = decider.decide()
        profiler.disable()
        wave.started(made)
    return top(profiler)
