"""engine-upgrade under exploration: three volumes attached on node-1 on a compatible older engine
image, two detached, the per-node limit raised to 1 (the wave starts). States: a volume waiting
behind the limit, one in flight live (attached), one in flight offline (detached), and one rolled
back by an operator mid-upgrade (which the service must upgrade again).

Finished: every volume asks for the default engine image, and every attached one runs it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from corral_decision import DecisionService
from corral_engine_upgrade.service import DEFINITION
from corral_sandbox.seeds import Seed, default_seed, resized
from corral_sandbox.seeds.model import EngineImageSeed, VolumeSeed
from corral_sandbox.simulator import SimConfig
from tests.explore.faults import Clear, nothing_to_clear
from tests.explore.safety import in_flight
from tests.explore.services import Explored, Progress
from tests.explore.services.common import (
    LONGHORN,
    Obj,
    attached_on,
    detached,
    events_about,
    instance_manager,
    status,
    subject,
    volumes,
)
from tests.explore.trap import Trap
from tests.explore.world import World
from tests.fixtures.sandbox import DEFAULT_IMAGE, UPGRADE_IMAGE, fast_config
from tests.scenarios.engine_upgrade.conftest import ENGINE_UPGRADE_KINDS
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING
from tests.scenarios.v2_upgrade.scenario import settled

COMPAT = UPGRADE_IMAGE
NODE = "node-1"


class EngineUpgrade(Explored):
    name = "engine-upgrade"
    states = ("waiting", "in-flight-live", "in-flight-offline", "rolled-back")
    kinds: ClassVar[tuple[str, ...]] = ENGINE_UPGRADE_KINDS
    limit_setting = LIMIT_SETTING
    volume_image = DEFAULT_IMAGE
    _live: Trap

    def seed(self) -> Seed:
        base = resized(default_seed(), nodes=3, volumes=0)
        attached = tuple(VolumeSeed(f"vol-{n}", replicas=2, attached_to=NODE, image=COMPAT) for n in "abc")
        parked = tuple(VolumeSeed(f"vol-{n}", replicas=2, image=COMPAT) for n in "de")
        images = (EngineImageSeed(DEFAULT_IMAGE, default=True), EngineImageSeed(COMPAT))
        return dataclasses.replace(base, engine_images=images, volumes=attached + parked)

    def sim_config(self) -> SimConfig:
        return fast_config(live_upgrade_seconds=0.5)

    def deciders(self) -> list[DecisionService[Any]]:
        return [DEFINITION]

    async def prepare(self, world: World) -> None:
        await settled(world.sandbox)

    def _targets(self, world: World, volume: str) -> dict[str, str]:
        sandbox = world.sandbox
        others = attached_on(sandbox, NODE, besides=(volume,))
        parked = detached(sandbox, besides=(volume,))
        return {
            "node": NODE,
            "volume": volume,
            "attached": others[-1] if others else "",
            "detached": parked[0] if parked else "",
            "pod": instance_manager(sandbox, NODE),
        }

    def arm(self, world: World, state: str) -> Trap:
        sandbox = world.sandbox

        def starts_live(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is None or not in_flight(new) or in_flight(old) or new["spec"].get("nodeID") != NODE:
                return None
            name = str(new["metadata"]["name"])
            if state == "waiting":
                waiting = [v for v in attached_on(sandbox, NODE) if v != name]
                return self._targets(world, waiting[0]) if waiting else None
            return self._targets(world, name)

        def starts_offline(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is None or old is None or new["spec"].get("nodeID"):
                return None
            if old["spec"].get("image") == COMPAT and new["spec"].get("image") == DEFAULT_IMAGE:
                return self._targets(world, str(new["metadata"]["name"]))
            return None

        def rolled_back(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is not None and in_flight(old) and new["spec"].get("image") == COMPAT:
                return self._targets(world, str(new["metadata"]["name"]))
            return None

        if state == "rolled-back":
            self._live = Trap(sandbox, LONGHORN, "volumes", starts_live, freeze=False)
            return Trap(sandbox, LONGHORN, "volumes", rolled_back)
        match = starts_offline if state == "in-flight-offline" else starts_live
        return Trap(sandbox, LONGHORN, "volumes", match)

    async def start(self, world: World, state: str) -> None:
        await world.sandbox.set_setting(LIMIT_SETTING, "1")
        if state == "rolled-back":
            await world.sandbox.wait_for(self._first_live, within=30, what="a live upgrade under way")
            # the operator rolls the volume back to the image it runs (Longhorn's rollback)
            await world.sandbox.patch("volumes", self._live.target["volume"], {"spec": {"image": COMPAT}})

    async def _first_live(self) -> bool:
        return self._live.fired.is_set()

    async def progress(self, world: World) -> Progress:
        late: list[str] = []
        for volume in volumes(world.sandbox):
            name = volume["metadata"]["name"]
            image, current = volume["spec"].get("image"), status(volume).get("currentImage")
            if image != DEFAULT_IMAGE or (volume["spec"].get("nodeID") and current != DEFAULT_IMAGE):
                said = (await events_about(world.sandbox, name))[-1:]
                late.append(f"{name} spec {image} current {current} ({said or 'no Event'})")
        return Progress(not late, "; ".join(late))

    def event_subjects(self, world: World) -> list[str]:
        """The target and every volume of its node (the in-flight one has a history to reorder)."""
        names = {world.target["volume"], *attached_on(world.sandbox, NODE)}
        return [subject("volume", world.sandbox, name) for name in sorted(names)]

    async def delete_target(self, world: World) -> Clear:
        volume = world.target["volume"]
        world.safety.released.add(volume)
        await world.sandbox.delete("volumes", volume)

        return nothing_to_clear

    async def change_target(self, world: World) -> Clear:
        volume = world.target["volume"]
        await world.sandbox.patch("volumes", volume, {"spec": {"numberOfReplicas": 3}})

        async def clear() -> None:
            await world.sandbox.patch("volumes", volume, {"spec": {"numberOfReplicas": 2}})

        return clear

    async def change_setting(self, world: World) -> Clear:
        await world.sandbox.set_setting(LIMIT_SETTING, "0")

        async def clear() -> None:
            await world.sandbox.set_setting(LIMIT_SETTING, "1")

        return clear
