"""setting-sync under exploration: three nodes, vol-a attached on node-1, vol-b detached; a new
priority class for Longhorn's components (a danger-zone setting applied only while every volume is
detached), with im-restart beside it as deployed (an IM pod's restart is its job). States: pending
(the value written while vol-a is attached; the operator detaches it once the fault clears),
applying (vol-a detached first; the first managed template patched) and applied (`applied`
just went true).

Finished: the Setting says applied, every component setting-sync manages carries the value (the
danger-zone scenarios' `lagging`), and so do the engine-image DaemonSets' templates, which
Longhorn's setting controller also manages (`longhorn.io/managed-by`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from kubernetes_asyncio.client import ApiException

from corral_decision import DecisionService
from corral_im_restart.service import DEFINITION as IM_RESTART
from corral_sandbox.seeds import Seed, default_seed, resized
from corral_sandbox.seeds.model import VolumeSeed
from corral_sandbox.simulator import SimConfig
from corral_setting_sync.service import DEFINITION
from tests.explore.faults import Clear, nothing_to_clear
from tests.explore.model import Cell, NotExpressible
from tests.explore.services import Explored, Progress
from tests.explore.services.common import Obj, attached_on, detached, instance_manager, status, subject
from tests.explore.trap import Trap
from tests.explore.world import World
from tests.fixtures.sandbox import WaitTimeout, fast_config
from tests.scenarios.setting_sync.conftest import KINDS
from tests.scenarios.setting_sync.scenario import Observer, carries
from tests.scenarios.v2_upgrade.scenario import settled

SETTING = "priority-class"
VALUES = ("system-cluster-critical", "system-node-critical")
NODE = "node-1"
VOLUME = "vol-a"
ENGINE_IMAGE_DS = "engine-image-"
ENGINE_IMAGE_GRACE_S = 2.0


class SettingSync(Explored):
    name = "setting-sync"
    states = ("pending", "applying", "applied")
    kinds: ClassVar[tuple[str, ...]] = tuple(KINDS)

    def seed(self) -> Seed:
        base = resized(default_seed(), nodes=3, volumes=0)
        return dataclasses.replace(
            base, volumes=(VolumeSeed(VOLUME, replicas=1, attached_to=NODE), VolumeSeed("vol-b", replicas=1))
        )

    def sim_config(self) -> SimConfig:
        return fast_config(pod_startup_seconds=0.02)

    def deciders(self) -> list[DecisionService[Any]]:
        return [DEFINITION, IM_RESTART]

    async def prepare(self, world: World) -> None:
        await settled(world.sandbox)
        observer = Observer(world.sandbox)
        await observer.until(
            lambda: observer.rolled_out() and observer.im_pods_running(), what="a settled cluster"
        )

    def _targets(self, world: World) -> dict[str, str]:
        sandbox = world.sandbox
        on_node = attached_on(sandbox, NODE)
        return {
            "node": NODE,
            "volume": VOLUME,
            "attached": on_node[-1] if on_node else "",
            "detached": (detached(sandbox, besides=(VOLUME,)) or [""])[0],
            "pod": instance_manager(sandbox, NODE),
        }

    def arm(self, world: World, state: str) -> Trap:
        sandbox = world.sandbox

        def written(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if (
                new is not None
                and new["metadata"]["name"] == SETTING
                and (old or {}).get("value") != new.get("value")
            ):
                return self._targets(world)
            return None

        def applied(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is None or new["metadata"]["name"] != SETTING or new.get("value") != VALUES[0]:
                return None
            if status(new).get("applied") is True and status(old).get("applied") is not True:
                return self._targets(world)
            return None

        def template(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is None or old is None:
                return None
            was = ((old["spec"].get("template") or {}).get("spec") or {}).get("priorityClassName")
            now = ((new["spec"].get("template") or {}).get("spec") or {}).get("priorityClassName")
            return self._targets(world) if now == VALUES[0] != was else None

        if state == "pending":
            return Trap(sandbox, "longhorn.io", "settings", written)
        if state == "applied":
            return Trap(sandbox, "longhorn.io", "settings", applied)
        return Trap(sandbox, "apps", "daemonsets", template)

    async def start(self, world: World, state: str) -> None:
        if state != "pending":
            await self._detach(world)
        await world.sandbox.set_setting(SETTING, VALUES[0])

    async def _detach(self, world: World) -> None:
        """The operator detaches the volume (one being deleted, by the cell's volume-deleted fault,
        is left to go: Longhorn detaches it, and it may vanish while this waits)."""
        sandbox = world.sandbox
        volume = await sandbox.find("volumes", VOLUME)
        if volume is None or volume["metadata"].get("deletionTimestamp"):
            return
        await sandbox.patch("volumes", VOLUME, {"spec": {"nodeID": ""}})

        async def detached() -> bool:
            held = await sandbox.find("volumes", VOLUME)
            return held is None or status(held).get("state") == "detached"

        await sandbox.wait_for(detached, within=30, what=f"{VOLUME} detached")

    async def after_clear(self, world: World, state: str) -> None:
        if state == "pending":
            await self._detach(world)

    async def progress(self, world: World) -> Progress:
        sandbox = world.sandbox
        observer = Observer(sandbox)
        value = str(observer.setting(SETTING).get("value", ""))
        late = []
        if not observer.applied(SETTING):
            message = status(observer.setting(SETTING)).get("message", "")
            late.append(f"{SETTING} not applied ({message!r})")
        late += observer.lagging(SETTING, value)
        if not (observer.rolled_out() and observer.im_pods_running()):
            late.append("components still rolling out")
        return Progress(not late, "; ".join(late))

    def _engine_images_lagging(self, world: World) -> list[str]:
        observer = Observer(world.sandbox)
        value = str(observer.setting(SETTING).get("value", ""))
        late = []
        for ds in observer.objects("apps", "daemonsets"):
            name = ds["metadata"]["name"]
            if name.startswith(ENGINE_IMAGE_DS):
                template = ds["spec"].get("template") or {}
                annotations = (template.get("metadata") or {}).get("annotations") or {}
                if not carries(SETTING, value, annotations, template.get("spec") or {}):
                    late.append(f"daemonsets/{name} (engine image)")
        return late

    async def after_finish(self, world: World) -> str:
        """The engine-image DaemonSets, given a moment more than the rest took (Longhorn's setting
        controller patches them with the CSI workloads)."""
        late: list[str] = []

        async def carried() -> bool:
            late[:] = self._engine_images_lagging(world)
            return not late

        try:
            await world.sandbox.wait_for(carried, within=ENGINE_IMAGE_GRACE_S, interval=0.05)
        except WaitTimeout:
            return f"applied, but still lagging {ENGINE_IMAGE_GRACE_S:.0f}s later: {'; '.join(late)}"
        return ""

    def known(self, cell: Cell, detail: str) -> str:
        if "(engine image)" in detail:
            return "issue 24 fix: setting-sync does not apply the priority class to engine-image DaemonSets"
        return ""

    def event_subjects(self, world: World) -> list[str]:
        return [subject("setting", world.sandbox, SETTING), subject("volume", world.sandbox, VOLUME)]

    async def delete_target(self, world: World) -> Clear:
        try:
            await world.sandbox.delete("settings", SETTING)
        except ApiException as refused:
            raise NotExpressible(
                f"Longhorn's webhook refuses a Setting's delete ({refused.status})"
            ) from None

        return nothing_to_clear

    async def change_target(self, world: World) -> Clear:
        """Someone else edits a managed template (the CSI plugin DaemonSet's annotations)."""
        from kubernetes_asyncio import client

        await client.AppsV1Api(world.sandbox.api).patch_namespaced_daemon_set(
            "longhorn-csi-plugin",
            world.sandbox.namespace,
            {"spec": {"template": {"metadata": {"annotations": {"explore/touched": "yes"}}}}},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )

        return nothing_to_clear

    async def change_setting(self, world: World) -> Clear:
        await world.sandbox.set_setting(SETTING, VALUES[1])

        return nothing_to_clear
