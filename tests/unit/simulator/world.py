"""A pure, in-memory stand-in for the API server, just enough to run the simulator's reconcile core
round after round in unit tests: writes are applied to a ClusterView directly (merge patches,
resourceVersions, finalizer-aware deletes). Only the core is under test here; the real wire is
exercised by tests/integration/simulator.

`lose_rate` makes the stand-in refuse that share of the writes (each on its own, seeded), the way an
API server answering 409/429/500 does: a refused write changes nothing and the controllers only see
it as an object that did not change.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

from corral_sandbox.seeds import Seed, base_objects, default_seed, resized
from corral_sandbox.simulator.config import SimConfig
from corral_sandbox.simulator.context import Memory
from corral_sandbox.simulator.nulls import NULL
from corral_sandbox.simulator.reconcile import RoundResult, reconcile
from corral_sandbox.simulator.view import ClusterView
from corral_sandbox.simulator.writes import Write


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


class World:
    def __init__(
        self,
        seed: Seed | None = None,
        config: SimConfig | None = None,
        *,
        lose_rate: float = 0.0,
        lose_seed: int = 0,
    ) -> None:
        self.seed = seed or resized(default_seed(), nodes=3, volumes=0)
        self.config = config or SimConfig(seed=self.seed.seed, images=self.seed.image_profiles)
        self.view = ClusterView.empty()
        self.memory = Memory()
        self.rng = random.Random(self.config.seed)
        self.now = 0.0
        self.rv = 0
        self.log: list[Write] = []
        self.lost: list[Write] = []
        self.lose_rate = lose_rate
        # when set, decides alone which writes are refused (a scripted fault instead of dice)
        self.losing: Callable[[Write], bool] | None = None
        self._losing = random.Random(lose_seed)
        for kind, obj in base_objects(self.seed):
            self.put(kind, obj)

    def put(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        stored = copy.deepcopy(obj)
        meta = stored.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("uid", f"uid-{self.rv}")
        if kind == "pod":
            stored.setdefault("status", {"phase": "Pending"})
        self.view.upsert(kind, stored)
        return stored

    def patch(self, kind: str, name: str, body: dict[str, Any]) -> None:
        obj = copy.deepcopy(self.view.get(kind, name))
        assert obj is not None, f"no {kind} {name}"
        _merge(obj, body)
        meta = obj["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.view.remove(kind, name)
            return
        self.put(kind, obj)

    def delete(self, kind: str, name: str) -> None:
        obj = self.view.get(kind, name)
        if obj is None:
            return
        if obj["metadata"].get("finalizers"):
            self.patch(kind, name, {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
        else:
            self.view.remove(kind, name)

    def round(self) -> RoundResult:
        result = reconcile(self.view, self.memory, self.config, self.now, "2026-01-01T00:00:00Z", self.rng)
        for write in result.writes:
            lost = self.losing(write) if self.losing else self._losing.random() < self.lose_rate
            if lost:
                self.lost.append(write)
                if write.observed is not None:
                    self.view.upsert(write.kind, write.observed)  # as the runner does on a refusal
                continue
            self.log.append(write)
            if write.verb == "create":
                assert write.body is not None
                self.put(write.kind, write.body)
            elif write.verb in ("patch", "status"):
                assert write.body is not None
                self.patch(write.kind, write.name, write.body)
            else:
                self.delete(write.kind, write.name)
        return result

    def settle(self, horizon: float = 30.0, max_rounds: int = 500) -> None:
        """Rounds until quiet, jumping time to the next timer (like Simulator.settle on a ManualClock)."""
        limit = self.now + horizon
        for _ in range(max_rounds):
            result = self.round()
            if result.writes:
                continue
            if result.next_deadline is None or result.next_deadline > limit:
                return
            self.now = result.next_deadline
        raise AssertionError("the world did not settle")

    def get(self, kind: str, name: str) -> dict[str, Any]:
        obj = self.view.get(kind, name)
        assert obj is not None, f"no {kind} {name}"
        return obj
