"""One reconcile round's inputs and outputs: the observed view, the controllers' in-memory state
(timers, requested faults), the simulated time and seeded RNG in, the writes out.

Timers are the one piece of memory the controllers keep: `ctx.waited(key, seconds)` starts a timer
the first time a condition is seen and reports whether it has lasted long enough. A timer nobody
asks about in a round is dropped, so when the condition goes away the wait starts over next time,
the way a controller restart or a changed object resets real Longhorn's progress.

A patch is applied to the round's view at once (so later controllers in the round see it), but the
object as it was observed is kept with the write: if the server refuses the write (409/429/500, a
cut connection), the runner puts that back, and the next round decides from what the server holds.
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from corral_sandbox.simulator.config import SimConfig
from corral_sandbox.simulator.io_record import VolumeIO
from corral_sandbox.simulator.nulls import NULL
from corral_sandbox.simulator.view import ClusterView, Obj
from corral_sandbox.simulator.writes import Verb, Write, diff_fields


@dataclass
class Memory:
    """What survives between rounds inside the simulated controllers (lost on a controller restart)."""

    timers: dict[str, float] = field(default_factory=dict)
    # faults requested through SimFaults, consumed by the next round
    crash_engines: set[str] = field(default_factory=set)
    fail_replicas: set[str] = field(default_factory=set)
    # IM name → simulated time before which its pod is not recreated
    im_backoff_until: dict[str, float] = field(default_factory=dict)
    # IM pod name → restart count to report (bumped by a container-restart fault)
    pod_restarts: dict[str, int] = field(default_factory=dict)
    # instances held in `starting` until released (SimFaults.hold_instance)
    held_instances: set[str] = field(default_factory=set)
    # IM pod name → the uid of the one pod whose container is to fail (phase Failed): keyed by uid
    # too, so a fault whose pod was deleted before it was seen failed never fails its replacement
    fail_im_pods: dict[str, str] = field(default_factory=dict)
    # IM name → the uids of its pods in the order they were seen (im_ledger.py; kept on restart)
    im_pod_history: dict[str, list[str]] = field(default_factory=dict)
    # SIM-FAULT: nodes no v2 target may be created on (a stalled relocation, V2U-16)
    blocked_targets: set[str] = field(default_factory=set)
    # SIM-CRASH: nodes whose v2 IM pod is killed and kept down (V2U-19)
    v2_im_down: set[str] = field(default_factory=set)
    # SIM-IO: volume → its I/O ledger (io_ledger.py; the tests' record, kept on restart)
    io: dict[str, VolumeIO] = field(default_factory=dict)
    # "kind/name" → when the watch told an instance was asked to stop (runner.py): its stop is timed
    # from then, as a real instance manager starts stopping a process when asked, not from the
    # round that reads the request (a round busy writing reads it up to a round later)
    stop_asked: dict[str, float] = field(default_factory=dict)

    def survivors(self) -> Memory:
        """What a controller restart keeps: the records tests read and the faults held on the
        cluster from outside (the controllers' own timers and requests are lost)."""
        return Memory(
            im_pod_history=self.im_pod_history,
            blocked_targets=self.blocked_targets,
            v2_im_down=self.v2_im_down,
            io=self.io,
        )


@dataclass
class ReconcileContext:
    view: ClusterView
    memory: Memory
    config: SimConfig
    now: float
    stamp: str  # RFC 3339 of `now`
    rng: random.Random
    writes: list[Write] = field(default_factory=list)
    deadlines: list[float] = field(default_factory=list)
    # objects whose reconcile failed this round (malformed input): reported, skipped, never fatal
    errors: list[str] = field(default_factory=list)
    touched: set[str] = field(default_factory=set)
    # (kind, name) → the object as observed before this round's first local change to it
    observed: dict[tuple[str, str], Obj] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.config.namespace

    # --- time ------------------------------------------------------------------------------------

    def waited(self, key: str, seconds: float) -> bool:
        """True once `key` has been waited on for `seconds` of simulated time."""
        self.touched.add(key)
        start = self.memory.timers.setdefault(key, self.now)
        due = start + seconds
        if self.now >= due:
            return True
        if due != float("inf"):
            self.deadlines.append(due)
        return False

    def start_timer(self, key: str, seconds: float) -> None:
        """Start `key`'s `seconds` wait now, before anyone asks: a step that follows at once on this
        one (a resume after a switch) is timed from this round, not from the round that sees it."""
        self.touched.add(key)
        self.memory.timers[key] = self.now
        self.deadlines.append(self.now + seconds)

    def forget_untouched_timers(self) -> None:
        for key in [k for k in self.memory.timers if k not in self.touched]:
            del self.memory.timers[key]

    def next_deadline(self) -> float | None:
        return min(self.deadlines) if self.deadlines else None

    @contextlib.contextmanager
    def isolated(self, kind: str, obj: Obj) -> Iterator[None]:
        """Reconcile one object so that a malformed one (a test or a user wrote nonsense into it) is
        reported and skipped while every other object is still reconciled."""
        try:
            yield
        except Exception as error:
            name = obj.get("metadata", {}).get("name", "?") if isinstance(obj, dict) else "?"
            self.errors.append(f"{kind} {name}: {type(error).__name__}: {error}")

    # --- writes ----------------------------------------------------------------------------------

    def create(self, kind: str, obj: Obj, reason: str) -> None:
        self.writes.append(Write("create", kind, obj["metadata"]["name"], obj, reason))

    def delete(self, kind: str, obj: Obj, reason: str) -> None:
        meta = obj["metadata"]
        self.writes.append(Write("delete", kind, meta["name"], None, reason, uid=meta.get("uid", "")))

    def patch_status(self, kind: str, obj: Obj, wanted: dict[str, Any], reason: str) -> None:
        """Merge-patch the status subresource so the listed status fields hold `wanted`."""
        self._patch("status", kind, obj, "status", wanted, reason)

    def patch_spec(self, kind: str, obj: Obj, wanted: dict[str, Any], reason: str) -> None:
        self._patch("patch", kind, obj, "spec", wanted, reason)

    def patch_metadata(self, kind: str, obj: Obj, wanted: dict[str, Any], reason: str) -> None:
        self._patch("patch", kind, obj, "metadata", wanted, reason)

    def _patch(
        self, verb: Verb, kind: str, obj: Obj, section: str, wanted: dict[str, Any], reason: str
    ) -> None:
        patch = diff_fields(obj.get(section) or {}, wanted)
        if not patch:
            return
        key = (kind, obj["metadata"]["name"])
        observed = self.observed.get(key)
        if observed is None:
            observed = self.observed[key] = copy.deepcopy(obj)
        self.writes.append(Write(verb, kind, key[1], {section: patch}, reason, observed=observed))
        _apply_locally(obj, section, patch)

    def committed(self, kind: str, obj: Obj) -> Obj:
        """`obj` as the API server holds it: before this round's own changes to it, which the round's
        view already shows (`_apply_locally`) but which the server may still refuse. A controller
        that acts on another controller's object reads it through this, as Longhorn's controllers
        read their informers' caches."""
        return self.observed.get((kind, obj["metadata"]["name"]), obj)

    def new_suffix(self) -> str:
        return f"{self.rng.getrandbits(32):08x}"


def _apply_locally(obj: Obj, section: str, patch: dict[str, Any]) -> None:
    """Reflect a patch in the round's view at once, so later controllers in the same round see it.

    The objects in the view are replaced by the server's answer after the round; this only keeps one
    round from deciding twice on the same stale field.
    """
    target = obj.setdefault(section, {})
    _merge(target, patch)


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif value is NULL:
            target[key] = None
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
