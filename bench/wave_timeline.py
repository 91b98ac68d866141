"""When each volume of a wave started and finished upgrading, read from the emulator's own record.

A wave's efficiency is about seconds and tens of milliseconds, so its timeline is taken where the
writes land rather than through a watch (whose delivery would add its own delay): the emulator
keeps every committed change of a kind with the object before and after (the watch history), and
its write log stamps each resourceVersion with the wall time it was committed. An upgrade starts at
the commit that sets the volume's `spec.image` to the target (the actuator's patch) and ends at the
commit that sets `status.currentImage` to it (the simulated volume controller reporting it done).

`slot_idle` then replays those instants per owner node: a slot freed by a finished upgrade waits
until the next command for that node lands, and that wait counts only while the node still has
volumes waiting for a slot. Everything after `upgrades` is pure: instants in, figures out.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from corral_sandbox.emulator import Emulator

GROUP = "longhorn.io"
_decode = msgspec.json.Decoder(dict[str, Any]).decode


@dataclass(frozen=True)
class Upgrade:
    volume: str
    owner: str  # status.ownerID when the upgrade started: the node whose slot it takes
    live: bool  # attached when it started (a live upgrade), else offline
    start: float  # wall time (time.time) the spec.image patch was committed
    end: float  # wall time status.currentImage reached the target

    @property
    def duration_s(self) -> float:
        return self.end - self.start


class TimelineError(RuntimeError):
    """The emulator no longer holds the changes the wave made (its history window was too small)."""


def _changes(emulator: Emulator, plural: str, namespace: str) -> Iterable[tuple[float, Any, Any]]:
    """(commit time, object before, object after) of every retained change in `namespace`."""
    collection = emulator.store.collections[(GROUP, plural)]
    committed = {
        r.resource_version: r.at for r in emulator.write_log.records(plural=plural) if r.resource_version
    }
    for change in collection.history.changes:
        if change.namespace != namespace or change.type == "DELETED":
            continue
        before = _decode(change.prev_raw) if change.prev_raw is not None else {}
        if change.rv not in committed:
            raise TimelineError(f"{plural} change at rv {change.rv} fell off the emulator's write log")
        yield committed[change.rv], before, _decode(change.raw)


def trigger_time(emulator: Emulator, namespace: str, setting: str, value: str) -> float:
    """When `setting` was last set to `value`: the wave's start."""
    found = [
        at
        for at, before, after in _changes(emulator, "settings", namespace)
        if after["metadata"]["name"] == setting
        and after.get("value") == value
        and before.get("value") != value
    ]
    if not found:
        raise TimelineError(f"no change of {setting} to {value!r} in the emulator's history")
    return found[-1]


def upgrades(emulator: Emulator, namespace: str, image: str) -> list[Upgrade]:
    """Every volume upgrade to `image` that both started and ended in the retained history."""
    history = emulator.store.collections[(GROUP, "volumes")].history
    if history.expired_rv:
        raise TimelineError(f"the emulator dropped volume changes up to rv {history.expired_rv}")
    started: dict[str, tuple[float, str, bool]] = {}
    done: list[Upgrade] = []
    for at, before, after in _changes(emulator, "volumes", namespace):
        name = after["metadata"]["name"]
        spec, status = after.get("spec") or {}, after.get("status") or {}
        if spec.get("image") == image and (before.get("spec") or {}).get("image") != image:
            started[name] = (at, str(status.get("ownerID", "")), status.get("state") == "attached")
        was = (before.get("status") or {}).get("currentImage")
        if status.get("currentImage") == image and was != image and name in started:
            start, owner, live = started.pop(name)
            done.append(Upgrade(name, owner, live, start, at))
    return done


@dataclass(frozen=True)
class Refill:
    """A slot freed by one upgrade's end and taken by another's start, on the same owner node."""

    freed_by: Upgrade
    filled_by: Upgrade

    @property
    def idle_s(self) -> float:
        return self.filled_by.start - self.freed_by.end


@dataclass
class SlotIdle:
    """Per freed slot, the wait until the next command for its node landed."""

    refills: list[Refill] = field(default_factory=list)
    first_command: list[float] = field(default_factory=list)  # per node: wave start → first command
    max_in_flight: dict[str, int] = field(default_factory=dict)
    overshoots: int = 0  # starts that found no free slot: the limit was exceeded


def slot_idle(wave: Sequence[Upgrade], wave_start: float, limit: int) -> SlotIdle:
    """Match, per owner node, each start to the oldest free slot (FIFO). The `limit` slots free at
    the wave's start give `first_command`; a slot freed by an upgrade's end counts as a refill only
    when some volume of that node was still waiting then (started later), otherwise nothing was
    left to put in it and its idleness costs nothing."""
    result = SlotIdle()
    by_node: dict[str, list[Upgrade]] = collections.defaultdict(list)
    for upgrade in wave:
        by_node[upgrade.owner].append(upgrade)
    for node, mine in sorted(by_node.items()):
        # ends before starts at the same instant: a slot is freed before it is taken again
        events = sorted(
            [(u.end, 0, i) for i, u in enumerate(mine)] + [(u.start, 1, i) for i, u in enumerate(mine)]
        )
        starts = sorted(u.start for u in mine)
        free: collections.deque[Upgrade | None] = collections.deque(
            [None] * limit
        )  # None: free from the start
        in_flight = peak = 0
        for moment, is_start, i in events:
            if not is_start:
                in_flight -= 1
                if starts[-1] > moment:  # a volume of this node still waits
                    free.append(mine[i])
                continue
            in_flight += 1
            peak = max(peak, in_flight)
            if not free:
                result.overshoots += 1
                continue
            freed_by = free.popleft()
            if freed_by is not None:
                result.refills.append(Refill(freed_by, mine[i]))
        result.first_command.append(starts[0] - wave_start)
        result.max_in_flight[node] = peak
    return result


def summary(values: Sequence[float], scale: float = 1000.0) -> dict[str, float]:
    """p50, p99 and max (nearest rank), times `scale` (seconds → ms by default), and the count."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)] * scale

    return {
        "count": len(ordered),
        "p50": round(rank(0.5), 1),
        "p99": round(rank(0.99), 1),
        "max": round(ordered[-1] * scale, 1),
        "mean": round(sum(ordered) / len(ordered) * scale, 1),
    }
