"""im-restart under exploration: three nodes; node-2's instance manager serves two attached
volumes (busy), another is idle; a new taint toleration makes every IM's pod lag the settings.
States: the idle IM with its restart due (the setting just written; not frozen, for the race
between the delete and an instance starting is the point), node-2's busy IM (SettingSynced just
went False, no delete), the idle one starting again after its restart, and the idle one's pod
being deleted.

Finished: every IM runs a pod that carries the toleration, or is busy and says so (SettingSynced
False with a message): a busy IM waits for its volumes, with a reason.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar

from corral_decision import DecisionService
from corral_im_restart.service import DEFINITION
from corral_sandbox.seeds import Seed, default_seed, resized
from corral_sandbox.seeds.model import VolumeSeed
from corral_sandbox.simulator import SimConfig
from tests.explore.faults import Clear, nothing_to_clear, pod_there
from tests.explore.model import Cell
from tests.explore.services import Explored, Progress
from tests.explore.services.common import (
    LONGHORN,
    Obj,
    attached_on,
    detached,
    instance_manager,
    status,
    subject,
)
from tests.explore.trap import Match, Trap
from tests.explore.world import World
from tests.fixtures.sandbox import fast_config
from tests.scenarios.im_restart.conftest import IM_KINDS
from tests.scenarios.im_restart.scenario import busy_instances, setting_synced
from tests.scenarios.setting_sync.scenario import carries
from tests.scenarios.v2_upgrade.scenario import settled

SETTING = "taint-toleration"
VALUES = ("key1=value1:NoSchedule", "key2=value2:NoSchedule")
BUSY = "node-2"


def idle_node(world: World) -> str:
    """A node whose IM serves nothing (the busy volumes' replicas may sit on any other node)."""
    sandbox = world.sandbox
    for node in ("node-1", "node-3"):
        im = sandbox.emulator.get(
            LONGHORN, "instancemanagers", sandbox.namespace, instance_manager(sandbox, node)
        )
        if not busy_instances(im) and not world.safety.running_in(instance_manager(sandbox, node)):
            return node
    raise AssertionError("no idle instance manager in the im-restart world")


class ImRestart(Explored):
    name = "im-restart"
    states = ("idle", "busy", "starting", "deleting")
    kinds: ClassVar[tuple[str, ...]] = tuple(IM_KINDS)

    def seed(self) -> Seed:
        base = resized(default_seed(), nodes=3, volumes=0)
        busy = tuple(VolumeSeed(f"vol-busy-{n}", replicas=1, attached_to=BUSY) for n in (1, 2))
        return dataclasses.replace(base, volumes=(*busy, VolumeSeed("vol-parked", replicas=1)))

    def sim_config(self) -> SimConfig:
        return fast_config(im_delete_failed_pods=False, im_recreate_backoff_seconds=0.05)

    def deciders(self) -> list[DecisionService[Any]]:
        return [DEFINITION]

    async def prepare(self, world: World) -> None:
        await settled(world.sandbox)

    def _targets(self, world: World, node: str) -> dict[str, str]:
        sandbox = world.sandbox
        # an idle IM's node has no volume: the volume faults then act on the busy node's, which the
        # service reads too (they make node-2's IM busy or idle)
        on_node = attached_on(sandbox, node) or attached_on(sandbox, BUSY)
        im = instance_manager(sandbox, node)
        return {
            "node": node,
            "im": im,
            "pod": im,
            "volume": on_node[0] if on_node else "",
            "attached": on_node[-1] if on_node else "",
            "detached": (detached(sandbox) or [""])[0],
        }

    def arm(self, world: World, state: str) -> Trap:
        sandbox = world.sandbox
        idle = idle_node(world)
        idle_im = instance_manager(sandbox, idle)
        busy_im = instance_manager(sandbox, BUSY)

        def unsynced(im: str, node: str) -> Match:
            def match(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
                if new is None or new["metadata"]["name"] != im:
                    return None
                now, was = setting_synced(new) or {}, setting_synced(old or {}) or {}
                if now.get("status") == "False" and was.get("status") != "False":
                    return self._targets(world, node)
                return None

            return match

        def setting_written(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is None or new["metadata"]["name"] != SETTING:
                return None
            return self._targets(world, idle) if (old or {}).get("value") != new.get("value") else None

        def starting(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is None or new["metadata"]["name"] != idle_im:
                return None
            if status(new).get("currentState") == "starting" != status(old).get("currentState"):
                return self._targets(world, idle)
            return None

        def deleting(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if op == "DELETE" and old is not None and old["metadata"]["name"] == idle_im:
                return self._targets(world, idle)
            return None

        if state == "idle":
            # not frozen: the race between the decision's delete and an instance starting is the point
            return Trap(sandbox, LONGHORN, "settings", setting_written, freeze=False)
        if state == "busy":
            return Trap(sandbox, LONGHORN, "instancemanagers", unsynced(busy_im, BUSY))
        if state == "starting":
            return Trap(sandbox, LONGHORN, "instancemanagers", starting)
        return Trap(sandbox, "", "pods", deleting)

    async def start(self, world: World, state: str) -> None:
        await world.sandbox.set_setting(SETTING, VALUES[0])

    async def progress(self, world: World) -> Progress:
        sandbox = world.sandbox
        setting = sandbox.emulator.get(LONGHORN, "settings", sandbox.namespace, SETTING) or {}
        value = str(setting.get("value", ""))
        late: list[str] = []
        for im in sandbox.emulator.list(LONGHORN, "instancemanagers", sandbox.namespace):
            if im["spec"].get("dataEngine") != "v1":
                continue
            name = im["metadata"]["name"]
            pod = sandbox.emulator.get("", "pods", sandbox.namespace, name)
            condition = setting_synced(im) or {}
            running = (
                pod is not None
                and (pod.get("status") or {}).get("phase") == "Running"
                and status(im).get("currentState") == "running"
            )
            meta = (pod or {}).get("metadata") or {}
            current = carries(SETTING, value, meta.get("annotations") or {}, (pod or {}).get("spec") or {})
            if running and current:
                continue
            if busy_instances(im):
                if condition.get("status") != "False" or not condition.get("message"):
                    late.append(f"{name} busy, its pod lagging, without saying so ({condition})")
                continue
            late.append(
                f"{name} idle, pod lags the settings (SettingSynced {condition.get('message', '')!r})"
            )
        return Progress(not late, "; ".join(late))

    def known(self, cell: Cell, detail: str) -> str:
        """Known: a busy delete where every instance named was only starting (an IM that had just
        begun one); a delete with an instance already running in the IM is something else."""
        busy = re.findall(r"pod of busy instance manager \S+ deleted; busy: (\[[^\]]*\])", detail)
        if busy and all("starting" in found and "running" not in found for found in busy):
            return "issue 24 fix: im-restart deleted the pod of an IM that had begun starting an instance"
        return ""

    def event_subjects(self, world: World) -> list[str]:
        im = world.target["im"]
        return [subject("instancemanager", world.sandbox, im), subject("pod", world.sandbox, im)]

    async def delete_target(self, world: World) -> Clear:
        """The IM itself deleted (Longhorn's IM controller recreates it)."""
        im = world.target["im"]
        world.safety.expect_delete("instancemanagers", im, world.target["node"])
        await world.sandbox.delete("instancemanagers", im)

        return nothing_to_clear

    async def change_target(self, world: World) -> Clear:
        """Someone else's write on the pod the decision is about (its resourceVersion moves)."""
        pod = world.target["pod"]
        await pod_there(world, pod)
        await world.sandbox.core.patch_namespaced_pod(
            pod,
            world.sandbox.namespace,
            {"metadata": {"annotations": {"explore/touched": "yes"}}},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )

        return nothing_to_clear

    async def change_setting(self, world: World) -> Clear:
        await world.sandbox.set_setting(SETTING, VALUES[1])

        return nothing_to_clear
