"""The Simulator: the reconcile core (reconcile.py) wired to a real API server through
kubernetes-asyncio — list+watch into the view, rounds on change or when a timer is due, writes
applied one by one with the server's answer folded back into the view.

Two ways to drive it:
* `await sim.start()` — background: watches every kind and reconciles on its own until `stop()`.
* `await sim.step()` / `await sim.settle()` — stepped: one round (or rounds until quiet) on demand,
  re-listing first. With a ManualClock this is fully deterministic: the same seed and the same
  script give the same write log (`sim.digest()`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import random
from typing import Any

from kubernetes_asyncio import client

from corral_sandbox.simulator.clock import Clock, WallClock, timestamp
from corral_sandbox.simulator.config import SimConfig
from corral_sandbox.simulator.context import Memory
from corral_sandbox.simulator.faults import SimFaults
from corral_sandbox.simulator.kubeio import KubeIO, WatchExpired
from corral_sandbox.simulator.reconcile import reconcile
from corral_sandbox.simulator.view import KINDS, ClusterView, name_of, resource_version
from corral_sandbox.simulator.writes import Write

log = logging.getLogger("corral_sandbox.simulator")

# answers that mean "the world moved under this write": look again, do not retry blindly
_STALE = {404, 409, 422}
_RETRY_SECONDS = 0.05
# writes in flight at once: enough to hide the round trip, few enough not to flood a shared API server
_WRITE_CONCURRENCY = 16
# real seconds a round waits after being woken, so one round sees a whole burst of events
_SETTLE_SECONDS = 0.005


class Simulator:
    def __init__(
        self,
        api: client.ApiClient,
        config: SimConfig | None = None,
        clock: Clock | None = None,
        *,
        rng: random.Random | None = None,
        resync_seconds: float = 10.0,
    ) -> None:
        """`resync_seconds` (real time): how often the background simulator re-lists everything, as
        an informer resync does, so a watch that went silent without ending costs a delay, not a
        stuck cluster."""
        self.config = config or SimConfig()
        self.clock: Clock = clock or WallClock()
        self.view = ClusterView.empty()
        self.memory = Memory()
        self.rng = rng or random.Random(self.config.seed)
        self.faults = SimFaults(self)
        self.paused: set[str] = set()
        self.write_log: list[dict[str, Any]] = []
        self.rounds = 0
        self.write_errors = 0
        # objects the controllers could not make sense of (each reported once, then skipped)
        self.object_errors: list[str] = []
        self._io = KubeIO(api, self.config.namespace)
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._deadline: float | None = None
        self._retry_at: float | None = None
        self._versions: dict[str, str] = {}
        self._stopping = False
        self._resync_seconds = resync_seconds
        self.clock.on_advance(self.wake)

    # --- lifecycle -------------------------------------------------------------------------------

    @property
    def io(self) -> KubeIO:
        """The simulator's own API client (fault helpers write through it, never around it)."""
        return self._io

    @property
    def running(self) -> bool:
        return bool(self._tasks)

    async def start(self) -> None:
        self._stopping = False
        await self.sync()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._watch(kind), name=f"sim-watch-{kind}") for kind in KINDS]
        self._tasks.append(loop.create_task(self._run(), name="sim-reconcile"))
        self._tasks.append(loop.create_task(self._resync(), name="sim-resync"))

    async def stop(self) -> None:
        self._stopping = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            _, stuck = await asyncio.wait(tasks, timeout=5.0)
            for task in stuck:
                log.error("simulator task %s did not stop", task.get_name())

    async def restart(self) -> None:
        """Lose every in-memory state and start from a fresh list, as a restarted manager would."""
        async with self._lock:
            # the IM pod ledger is the tests' record of the cluster, not the controllers' memory
            self.memory = self.memory.survivors()
            await self.sync()
        self.wake()

    def reconfigure(self, **changes: Any) -> SimConfig:
        """Change knobs while running (`live_upgrade_seconds=30`, `non_working_images=…`); the next
        round uses them. Timers already running keep their start and are judged by the new duration."""
        self.config = dataclasses.replace(self.config, **changes)
        self.wake()
        return self.config

    def wake(self) -> None:
        self._wake.set()

    async def sync(self) -> None:
        for kind in KINDS:
            items, version = await self._io.list(kind)
            self.view.replace_kind(kind, items)
            self._versions[kind] = version

    # --- rounds ----------------------------------------------------------------------------------

    async def step(self) -> list[Write]:
        """One reconcile round and its writes. Re-lists first unless the watches keep the view."""
        async with self._lock:
            if not self.running:
                await self.sync()
            now = self.clock.now()
            result = reconcile(
                self.view,
                self.memory,
                self.config,
                now,
                timestamp(self.clock),
                self.rng,
                frozenset(self.paused),
            )
            self.rounds += 1
            self._deadline = result.next_deadline
            for error in result.errors:
                if error not in self.object_errors:
                    self.object_errors.append(error)
                    log.warning("skipping a malformed object: %s", error)
            await self._apply_all(result.writes)
            return result.writes

    async def settle(self, *, advance: bool = True, horizon: float = 60.0, max_rounds: int = 2000) -> int:
        """Rounds until nothing is written and no timer is due; returns the rounds run.

        With `advance` and a manual clock, time jumps to the next timer whenever a round is quiet, so
        every pending wait (deploys, upgrades, rebuilds…) runs to its end — but never more than
        `horizon` simulated seconds past the start, so hour-long waits (engine-image expiry) and
        never-ending ones (a non-working image) do not run away.
        """
        limit = self.clock.now() + horizon
        for rounds in range(1, max_rounds + 1):
            writes = await self.step()
            if writes:
                continue
            due = self._deadline
            advance_to = getattr(self.clock, "advance_to", None)
            if due is None or not advance or advance_to is None or due > limit:
                return rounds
            advance_to(due)
        raise RuntimeError(f"simulator did not settle in {max_rounds} rounds")

    def digest(self) -> str:
        """SHA-256 of the write log: equal for two runs that wrote the same things in the same order."""
        sha = hashlib.sha256()
        for record in self.write_log:
            sha.update(json.dumps(record, sort_keys=True, separators=(",", ":")).encode())
            sha.update(b"\n")
        return sha.hexdigest()

    async def _run(self) -> None:
        while not self._stopping:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel of stop()
            try:
                async with asyncio.timeout(self._sleep_for()):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            # let a burst of watch events (the echo of the last round's writes) land before looking
            await asyncio.sleep(_SETTLE_SECONDS)
            try:
                writes = await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("simulator round failed")
                self._retry_at = self.clock.now()
                await asyncio.sleep(_RETRY_SECONDS)
                continue
            if writes:
                self._wake.set()

    def _sleep_for(self) -> float | None:
        dues = [d for d in (self._deadline, self._retry_at) if d is not None]
        self._retry_at = None
        if not dues:
            return None
        real = self.clock.real_delay(min(dues) - self.clock.now())
        return None if real is None else max(real, 0.0)

    # --- writes ----------------------------------------------------------------------------------

    async def _apply_all(self, writes: list[Write]) -> None:
        """Writes to different objects go out concurrently; one object's writes keep their order.

        The log records the round's writes in decision order before any is sent, so it stays
        deterministic however the answers interleave.
        """
        for write in writes:
            self.write_log.append(_scrub(write.record()))
        gate = asyncio.Semaphore(_WRITE_CONCURRENCY)

        async def in_order(chain: list[Write]) -> None:
            for write in chain:
                async with gate:
                    await self._apply(write)

        # The objects whose instance reports a new state (a replica stopped, an engine started) go
        # first: a real instance manager reports each process as it changes, not after the volume
        # controller's writes of the same moment, and a round of a hundred writes otherwise spreads
        # a node's 40 replica stops over all of them (bench_v2_upgrade's failing-replicas). A
        # volume's status goes last, as at the end of Longhorn's sync: whoever sees the volume
        # report a result (currentImage, attached…) finds its engine and replicas already written.
        # A workload's status likewise: a rollout reported done has its pods already replaced.
        per_object: dict[tuple[str, str], list[Write]] = {}
        for write in writes:
            if not _result_status(write):
                per_object.setdefault((write.kind, write.name), []).append(write)
        reports = [chain for chain in per_object.values() if any(map(_instance_report, chain))]
        others = [chain for chain in per_object.values() if not any(map(_instance_report, chain))]
        results: dict[tuple[str, str], list[Write]] = {}
        for write in filter(_result_status, writes):
            results.setdefault((write.kind, write.name), []).append(write)
        for chains in (reports, others, list(results.values())):
            await asyncio.gather(*(in_order(chain) for chain in chains))

    async def _apply(self, write: Write) -> None:
        if self.faults.write_delay_seconds:
            await asyncio.sleep(self.faults.write_delay_seconds)
        try:
            if write.verb == "create":
                answer = await self._io.create(write.kind, write.body or {})
                self.view.upsert(write.kind, answer)
            elif write.verb in ("patch", "status"):
                answer = await self._io.patch(
                    write.kind,
                    write.name,
                    write.body or {},
                    status=write.verb == "status",
                    observed=write.observed,
                )
                self.view.upsert(write.kind, answer)
            else:
                answer = await self._io.delete(write.kind, write.name, write.uid)
                if answer.get("kind") not in (None, "Status") and answer.get("metadata", {}).get(
                    "finalizers"
                ):
                    self.view.upsert(write.kind, answer)
                else:
                    self.view.remove(write.kind, write.name, resource_version(answer))
        except client.ApiException as error:
            self.write_errors += 1
            self._forget_refused(write)
            if error.status in _STALE:
                log.debug(
                    "%s %s/%s refused (%s): will look again", write.verb, write.kind, write.name, error.status
                )
                if error.status == 404 and write.verb == "delete":
                    self.view.remove(write.kind, write.name)
            else:
                log.warning(
                    "%s %s/%s failed (%s); retrying", write.verb, write.kind, write.name, error.status
                )
                if error.status >= 500:
                    await self._read_back(write)
            self._retry_at = self.clock.now()
        except (OSError, TimeoutError) as error:
            self.write_errors += 1
            self._forget_refused(write)
            log.warning("%s %s/%s failed (%s); retrying", write.verb, write.kind, write.name, error)
            await self._read_back(write)
            self._retry_at = self.clock.now()

    async def _read_back(self, write: Write) -> None:
        """A create whose answer was lost (a cut connection, a timeout, a 5xx) may have been stored all
        the same. Look it up by name before the next round decides, so a replica named at random is
        not made a second time because the watch has not told of the first one yet."""
        if write.verb != "create":
            return
        # not there (404), or unknown still: the watch or the next resync will tell
        with contextlib.suppress(client.ApiException, OSError, TimeoutError):
            self.view.upsert(write.kind, await self._io.get(write.kind, write.name))

    def _forget_refused(self, write: Write) -> None:
        """A refused patch changed nothing on the server: the view goes back to the object as observed
        (unless something newer arrived meanwhile), so the next round redoes the change instead of
        believing it made."""
        if write.observed is not None:
            self.view.upsert(write.kind, write.observed)

    def _note_stop_asked(self, kind: str, obj: dict[str, Any]) -> None:
        """An instance whose desireState turns to stopped: note when (Memory.stop_asked)."""
        if kind not in ("replica", "engine") or (obj.get("spec") or {}).get("desireState") != "stopped":
            return
        held = self.view.get(kind, name_of(obj))
        if held is not None and (held.get("spec") or {}).get("desireState") != "stopped":
            self.memory.stop_asked.setdefault(f"{kind}/{name_of(obj)}", self.clock.now())

    async def _resync(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self._resync_seconds)
            try:
                async with self._lock:
                    await self.sync()
            except (client.ApiException, OSError, TimeoutError) as error:
                log.warning("resync failed (%s); the watches carry on", error)
            self.wake()

    # --- watches ---------------------------------------------------------------------------------

    async def _watch(self, kind: str) -> None:
        while not self._stopping:
            try:
                async for event, obj in self._io.watch(kind, self._versions.get(kind, "")):
                    version = obj.get("metadata", {}).get("resourceVersion", "")
                    if version:
                        self._versions[kind] = version
                    if event == "BOOKMARK":
                        continue
                    # The echo of a write whose answer the view already holds tells nothing new: a
                    # round for it alone would find nothing to do, and hold the next real event
                    # behind it.
                    held = self.view.get(kind, name_of(obj))
                    if event == "DELETED":
                        news = held is not None
                        self.view.remove(kind, name_of(obj), resource_version(obj))
                    else:
                        news = held is None or resource_version(held) != resource_version(obj)
                        self._note_stop_asked(kind, obj)
                        self.view.upsert(kind, obj)
                    if news:
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except WatchExpired:
                items, version = await self._io.list(kind)
                self.view.replace_kind(kind, items)
                self._versions[kind] = version
                self._wake.set()
            except Exception as error:  # a cut watch, a 5xx: resume from the last version seen
                log.debug("watch of %s ended (%s); resuming", kind, error)
                await asyncio.sleep(_RETRY_SECONDS)


def _result_status(write: Write) -> bool:
    """A status that reports the result of the round's other writes (a volume's, a workload's)."""
    return write.kind in ("volume", "daemonset", "deployment") and write.verb == "status"


def _instance_report(write: Write) -> bool:
    """A replica's or engine's process reported in a new state (the instance manager's report)."""
    status = (write.body or {}).get("status") if write.verb == "status" else None
    return write.kind in ("replica", "engine") and isinstance(status, dict) and "currentState" in status


def _scrub(record: dict[str, Any]) -> dict[str, Any]:
    """Drop server-assigned uids from the logged body: they differ between otherwise equal runs."""

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items() if k != "uid"}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    cleaned: dict[str, Any] = clean(record)
    return cleaned
