"""The schedules a wave is judged against: the ideal one per owner node, and Longhorn's resync bound.

An engine-upgrade wave is, per owner node, a set of jobs (one per volume, each with its upgrade
duration) run on `limit` parallel slots. The fastest any orchestrator could finish a node is the
optimal makespan of those jobs on `limit` identical machines (P||Cmax). That problem is NP-hard in
general, so this module brackets it and then narrows the bracket with a bounded branch-and-bound:

* below, a valid lower bound: the largest of the longest job, the total spread evenly over the
  slots, the two jobs that must share a slot among the limit + 1 longest, and the LPT schedule
  divided by Graham's factor 4/3 - 1/(3 limit) (LPT is never longer than that times the optimum);
* above, the best schedule found: LPT (longest processing time first) list scheduling to start
  with, improved by the search.

`Ideal.makespan_s`, the yardstick a wave is divided by, is the proven optimum when the search
finished (`exact`), and otherwise the lower bound, never the best schedule found: a heuristic
schedule is longer than the optimum by an unknown amount, and dividing by it would flatter the
wave (and an orchestrator that happened to pick in LPT order would look perfect by construction).
So a ratio against `makespan_s` is never below the ratio against the true optimum. With two
distinct durations the search proves the optimum at once; with measured, all-different durations
it usually ends within a fraction of a percent of the lower bound without proving it, and then the
bound is used.

`resync_schedule` replays the same jobs under a controller that fills freed slots only at periodic
resync ticks: the bound of a controller that looks again only on its resync when no event wakes it.

Pure: durations in, numbers out; no clock, no I/O.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

EPS = 1e-9
SEARCH_BUDGET = 200_000  # branch-and-bound steps per node before settling for the bracket


@dataclass(frozen=True)
class Ideal:
    """The optimal makespan of one node's jobs on `limit` slots, or the bracket around it."""

    makespan_s: float  # the proven optimum when `exact`, else `lower_bound_s`: never above the optimum
    best_found_s: float  # the shortest schedule the search found (<= LPT's): never below the optimum
    lower_bound_s: float  # see lower_bound()
    lpt_s: float  # longest-processing-time-first list schedule
    exact: bool  # `best_found_s` is proven optimal (and `makespan_s` is it)


def lower_bound(durations: Sequence[float], limit: int) -> float:
    """No schedule is shorter than its longest job, than the total spread evenly over the slots,
    than two of the limit + 1 longest jobs run one after the other (two of them share a slot), or
    than LPT's makespan over Graham's bound on LPT (4/3 - 1/(3 limit) times the optimum)."""
    if not durations:
        return 0.0
    jobs = sorted(durations, reverse=True)
    pair = jobs[limit - 1] + jobs[limit] if len(jobs) > limit else 0.0
    graham = lpt(jobs, limit) * 3 * limit / (4 * limit - 1)  # = LPT / (4/3 - 1/(3 limit))
    return max(jobs[0], sum(jobs) / limit, pair, graham)


def list_schedule(durations: Sequence[float], limit: int) -> float:
    """Makespan of greedy list scheduling in the given order: each job onto the slot that frees
    first, at once (what an orchestrator with no reaction delay does with its own pick order)."""
    loads = [0.0] * limit
    for duration in durations:
        heapq.heapreplace(loads, loads[0] + duration)
    return max(loads)


def lpt(durations: Sequence[float], limit: int) -> float:
    """Makespan of LPT: list scheduling, longest job first."""
    return list_schedule(sorted(durations, reverse=True), limit)


def ideal(durations: Sequence[float], limit: int, budget: int = SEARCH_BUDGET) -> Ideal:
    """The optimal makespan, searched depth-first from the LPT schedule down (longest job first;
    slots with equal load are tried once; a branch is cut when it cannot beat the best found).
    Past `budget` steps the optimum is not proven and `makespan_s` is the lower bound."""
    if limit < 1:
        raise ValueError("a node needs at least one slot")
    floor, best = lower_bound(durations, limit), lpt(durations, limit)
    if best <= floor + EPS:
        return Ideal(best, best, floor, best, exact=True)
    jobs = sorted(durations, reverse=True)
    remaining = [0.0] * (len(jobs) + 1)
    for i in range(len(jobs) - 1, -1, -1):
        remaining[i] = remaining[i + 1] + jobs[i]
    loads = [0.0] * limit
    upper = best
    steps = 0

    def search(i: int) -> bool:
        """Place jobs[i:]; False when the budget ran out."""
        nonlocal upper, steps
        steps += 1
        if steps > budget:
            return False
        if i == len(jobs):
            upper = max(loads)
            return True
        if max(max(loads), (sum(loads) + remaining[i]) / limit) >= upper - EPS:
            return True
        tried: set[float] = set()
        for slot in range(limit):
            load = loads[slot]
            if load in tried or load + jobs[i] >= upper - EPS:
                continue
            tried.add(load)
            loads[slot] = load + jobs[i]
            finished = search(i + 1)
            loads[slot] = load
            if not finished:
                return False
            if upper <= floor + EPS:
                return True  # the bound is met: nothing can be shorter
        return True

    exact = search(0) or upper <= floor + EPS
    return Ideal(upper if exact else floor, upper, floor, best, exact=exact)


@dataclass(frozen=True)
class ResyncRun:
    """One node's jobs under a controller that starts work only at its resync ticks."""

    makespan_s: float
    idle_s: list[float]  # per refill: from a job's end to the tick that gave its slot the next job


def resync_schedule(durations: Sequence[float], limit: int, resync_s: float) -> ResyncRun:
    """Jobs in the given order; at t = 0, resync_s, 2 resync_s … every free slot takes the next job.
    A slot freed between ticks stays idle until the next tick (no event wakes the controller)."""
    unused = limit  # slots free since the start: their wait is the first tick's, not a refill's
    freed: list[float] = []  # when each slot freed by a finished job became free
    running: list[float] = []  # end times of the jobs in flight
    idle: list[float] = []
    pending = list(durations)
    tick, end = 0.0, 0.0
    while pending:
        while running and running[0] <= tick + EPS:
            freed.append(heapq.heappop(running))
        while (unused or freed) and pending:
            if unused:
                unused -= 1
            else:
                idle.append(tick - freed.pop(0))
            finish = tick + pending.pop(0)
            heapq.heappush(running, finish)
            end = max(end, finish)
        tick += resync_s
    return ResyncRun(end, idle)
