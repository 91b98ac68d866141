"""Engine-upgrade waves with one fault each, and the invariants every observation asserts.

A wave moves every volume to the default engine image (the first by turning automatic engine
upgrade on, each next one to a new engine image it deploys and points `default-engine-image` at),
one volume per owner node at a time, so it runs in rounds and a fault injected at its first patch
lands mid-wave. Each wave has an image of its own, never back to an earlier one: a command's id is a
hash of its target, change and precondition, so going back within LH_COMMANDS' dedup window would
re-issue the very ids of an earlier wave, and JetStream would drop them as duplicates.

What the test knows about the cluster it reads from the emulator in this process, past any
injected API fault, never from a service's view:

* the `Ledger`, an admission hook, sees every change of a volume's `spec.image` the API server
  admits: a volume changed twice to the same wave's image is a doubled write, one never changed a
  lost one;
* every observation counts volumes in flight per owner node (Longhorn's definition: spec.image !=
  status.currentImage, on status.ownerID) against the limit.

`Wave.run` returns the fault's record for chaos.json: the fault is injected once the wave's first
round is patched (every node's slot taken), and `recover_s` is from the injection to the next
volume patched: the whole control loop working again (an upgrade finishing, the watcher publishing
it, the decider deciding, the actuator writing), at least one simulated upgrade (0.5 s) even
without a fault. `wave_s` is the whole wave.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, Sandbox

GROUP = "longhorn.io"
LIMIT_SETTING = "concurrent-automatic-engine-upgrade-per-node-limit"
DEFAULT_SETTING = "default-engine-image"
Action = Callable[[], Awaitable[Any]]


@dataclass(frozen=True)
class Change:
    at: float  # monotonic
    volume: str
    image: str


class Ledger:
    """Every admitted change of a volume's `spec.image`, whoever wrote it."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.changes: list[Change] = []
        sandbox.emulator.register_admission(GROUP, "volumes", self._see, name="ledger.chaos.test")

    def _see(self, operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> str | None:
        if operation == "UPDATE" and old is not None and new is not None:
            before, after = old["spec"].get("image", ""), new["spec"].get("image", "")
            if before != after:
                self.changes.append(Change(time.monotonic(), new["metadata"]["name"], after))
        return None  # admits everything: it only watches

    def since(self, start: float, image: str) -> list[Change]:
        return [c for c in self.changes if c.at >= start and c.image == image]


@dataclass
class Invariants:
    """What every observation of one wave checks; breaches are counted, then asserted to be none."""

    sandbox: Sandbox
    ledger: Ledger
    limit: int
    start: float
    image: str
    observations: int = 0
    limit_breaches: list[dict[str, int]] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    max_in_flight: Counter[str] = field(default_factory=Counter)

    def volumes(self) -> list[dict[str, Any]]:
        return self.sandbox.emulator.list(GROUP, "volumes", self.sandbox.namespace)

    async def check(self) -> None:
        in_flight: Counter[str] = Counter()
        for volume in self.volumes():
            status = volume.get("status", {})
            if volume["spec"].get("image", "") != status.get("currentImage", ""):
                in_flight[status.get("ownerID", "")] += 1
        self.observations += 1
        for node, count in in_flight.items():
            self.max_in_flight[node] = max(self.max_in_flight[node], count)
        over = {node: n for node, n in in_flight.items() if n > self.limit}
        if over:
            self.limit_breaches.append(over)
        patched = Counter(c.volume for c in self.ledger.since(self.start, self.image))
        self.doubled = sorted(v for v, n in patched.items() if n > 1)
        assert not self.limit_breaches, f"in flight over the limit {self.limit}: {self.limit_breaches}"
        assert not self.doubled, f"volumes patched twice to {self.image}: {self.doubled}"

    async def all_on_target(self) -> bool:
        return all(
            v["spec"].get("image") == self.image and v.get("status", {}).get("currentImage") == self.image
            for v in self.volumes()
        )


class Waves:
    """The volumes and the waves of one stack: `prepare` once, then `run` one wave per fault."""

    def __init__(self, sandbox: Sandbox, *, per_node: int = 3, nodes: int = 3, limit: int = 1) -> None:
        self.sandbox = sandbox
        self.names = [f"vol-{n}-{i}" for n in range(1, nodes + 1) for i in range(per_node)]
        self.nodes = nodes
        self.limit = limit
        self.ledger = Ledger(sandbox)
        self.waves = 0

    async def deploy(self, image: str) -> None:
        await self.sandbox.create_engine_image(image)

        async def deployed() -> bool:
            ei = await self.sandbox.engine_image(image)
            return bool(ei.get("status", {}).get("state") == "deployed")

        await self.sandbox.wait_for(deployed, within=30, what=f"{image} deployed")

    async def prepare(self) -> None:
        """Every volume attached and healthy on the older image, automatic upgrade still off."""
        sandbox = self.sandbox
        await self.deploy(UPGRADE_IMAGE)
        for name in self.names:
            node = f"node-{name.split('-')[1]}"
            await sandbox.create_volume(name, replicas=2, image=UPGRADE_IMAGE, node=node)

        async def healthy() -> bool:
            volumes = sandbox.emulator.list(GROUP, "volumes", sandbox.namespace)
            healthy = [v for v in volumes if v.get("status", {}).get("robustness") == "healthy"]
            return len(healthy) == len(self.names)

        await sandbox.wait_for(healthy, within=30, what="every volume attached and healthy")

    async def _next_target(self) -> str:
        """The image of the next wave, deployed on every node."""
        if self.waves == 0:
            return DEFAULT_IMAGE
        image = f"{DEFAULT_IMAGE}-chaos-{self.waves}"
        await self.deploy(image)
        return image

    async def _start(self, target: str) -> None:
        if self.waves == 0:
            await self.sandbox.set_setting(LIMIT_SETTING, str(self.limit))
        else:
            await self.sandbox.set_setting(DEFAULT_SETTING, target)

    async def run(
        self,
        fault: str,
        inject: Action,
        *,
        lift: Action | None = None,
        within: float = 60.0,
    ) -> dict[str, Any]:
        """One wave: started, `inject` once its first round is patched, `lift` (if any) at the next
        patch after the fault, then on to the end; invariants at every observation; its record for
        chaos.json."""
        target = await self._next_target()
        start = time.monotonic()
        check = Invariants(self.sandbox, self.ledger, self.limit, start, target)
        wait = self.sandbox.wait_for
        await self._start(target)

        def patched_after(moment: float, count: int = 1) -> Callable[[], Awaitable[Change | None]]:
            async def probe() -> Change | None:
                changes = self.ledger.since(moment, target)
                return changes[count - 1] if len(changes) >= count else None

            return probe

        # Every node's slots taken: the next patch needs the whole loop (an upgrade finishing, the
        # watcher publishing it, the decider deciding, the actuator writing), so it measures recovery.
        await wait(
            patched_after(start, self.nodes * self.limit),
            within=within,
            what=f"{fault}: the wave's first round",
            invariant=check.check,
        )
        injected = time.monotonic()
        await inject()
        first = await wait(
            patched_after(injected),
            within=within,
            what=f"{fault}: a patch after the fault",
            invariant=check.check,
        )
        if lift is not None:
            await lift()
        await wait(
            check.all_on_target,
            within=within,
            what=f"{fault}: every volume on {target}",
            invariant=check.check,
        )
        await check.check()
        patched = Counter(c.volume for c in self.ledger.since(start, target))
        lost = sorted(set(self.names) - set(patched))
        assert not lost, f"{fault}: volumes never patched to {target}: {lost}"
        self.waves += 1
        return {
            "fault": fault,
            "recover_s": round(first.at - injected, 3),
            "wave_s": round(time.monotonic() - start, 3),
            "volumes": len(self.names),
            "limit_per_node": self.limit,
            "max_in_flight_per_node": max(check.max_in_flight.values(), default=0),
            "observations": check.observations,
            "limit_breaches": len(check.limit_breaches),
            "doubled_writes": len(check.doubled),
            "lost_writes": len(lost),
        }


async def settle(sandbox: Sandbox, seconds_without_writes: float = 0.5) -> None:
    """Until the emulator has taken no write for a moment (the simulator done with the last wave)."""
    last = [sandbox.emulator.write_log.total, time.monotonic()]

    async def quiet() -> bool:
        total = sandbox.emulator.write_log.total
        if total != last[0]:
            last[:] = [total, time.monotonic()]
        return time.monotonic() - last[1] >= seconds_without_writes

    await sandbox.wait_for(quiet, within=30, interval=0.05, what="the cluster quiet")
    await asyncio.sleep(0)
