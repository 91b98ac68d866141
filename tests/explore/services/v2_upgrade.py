"""v2-upgrade under exploration: the v2 scenarios' cluster (three v2 nodes; vol-1..3 attached on
node-1 with a replica on every node) plus a detached v2 volume, and the operator's upgrade to the
new instance-manager image. States: each manager state and each node step, entered by the write
that puts the CR there (the kill -9 scenarios' traps).

Safety adds the v2 scenarios' own invariants (one node in flight and named by its manager, no
attached v2 volume detached, v1 untouched), judged at every write by their `UpgradeObserver`.

Finished: the manager ended (completed, or error with a message), no node upgrade is left
unfinished, no node is still flagged upgrade-requested (a flag of ours must never hold a rebuild),
every v2 volume that still exists is healthy, and no node upgrade lists a volume that is gone.
"""

from __future__ import annotations

from typing import Any, ClassVar

from corral_decision import DecisionService
from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION
from corral_sandbox.seeds import Seed
from corral_sandbox.simulator import SimConfig
from corral_v2_upgrade.service import DEFINITION
from corral_v2_upgrade.states import MANAGER_STEPS, NODE_STEPS
from tests.explore.faults import Clear, nothing_to_clear
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
    volumes,
)
from tests.explore.trap import Trap
from tests.explore.world import World
from tests.fixtures.sandbox import fast_config
from tests.scenarios.v2_upgrade.conftest import V2_KINDS
from tests.scenarios.v2_upgrade.invariants import MANAGERS, NODE_UPGRADES, TERMINAL
from tests.scenarios.v2_upgrade.observer import UpgradeObserver
from tests.scenarios.v2_upgrade.scenario import (
    MANAGER,
    NEWER_IM,
    pull_image,
    set_target_image,
    start_upgrade,
    v2_seed,
    v2_volume,
)

FLAG = "DataEngineUpgradeRequested"
FIRST_NODE = "node-1"


def _label(prefix: str, step: str) -> str:
    return f"{prefix}:{step or 'created'}"


STATES = tuple(_label("manager", str(s)) for s in MANAGER_STEPS) + tuple(
    _label("node", str(s)) for s in NODE_STEPS
)


class V2Upgrade(Explored):
    name = "v2-upgrade"
    states = STATES
    kinds: ClassVar[tuple[str, ...]] = V2_KINDS
    decider_settings: ClassVar[dict[str, Any]] = {"retry_backoff_s": 1.0}
    data_engine = "v2"
    recover_s = 20.0
    observer: UpgradeObserver
    manager_deleted = False

    def seed(self) -> Seed:
        return v2_seed([*(v2_volume(f"vol-{i}") for i in (1, 2, 3)), v2_volume("vol-4", attached=False)])

    def sim_config(self) -> SimConfig:
        return fast_config()

    def deciders(self) -> list[DecisionService[Any]]:
        return [DEFINITION]

    def observe(self, world: World) -> None:
        self.observer = UpgradeObserver(world.sandbox)

    def _targets(self, world: World, node: str, upgrade: str = "") -> dict[str, str]:
        sandbox = world.sandbox
        attached = attached_on(sandbox, FIRST_NODE)
        return {
            "node": node,
            "upgrade": upgrade,
            "volume": attached[0] if attached else "",
            "attached": attached[-1] if attached else "",
            "detached": (detached(sandbox) or [""])[0],
            "pod": instance_manager(sandbox, node, "v2"),
        }

    def arm(self, world: World, state: str) -> Trap:
        machine, _, step = state.partition(":")
        wanted = "" if step == "created" else step
        plural = MANAGERS if machine == "manager" else NODE_UPGRADES

        def entered(op: str, old: Obj | None, new: Obj | None) -> dict[str, str] | None:
            if new is None:
                return None
            now = str(status(new).get("state") or "")
            if wanted == "":
                if op != "CREATE":
                    return None
            elif now != wanted or str(status(old).get("state") or "") == now:
                return None
            if machine == "manager":
                node = str(status(new).get("upgradingNode") or FIRST_NODE)
                return self._targets(world, node)
            return self._targets(world, str(new["spec"].get("nodeID", "")), str(new["metadata"]["name"]))

        return Trap(world.sandbox, CORRAL_GROUP, plural, entered)

    async def start(self, world: World, state: str) -> None:
        await start_upgrade(world.sandbox)

    def _custom(self, world: World, plural: str) -> list[Obj]:
        return world.sandbox.emulator.list(CORRAL_GROUP, plural, world.sandbox.namespace)

    async def progress(self, world: World) -> Progress:
        sandbox = world.sandbox
        late: list[str] = []
        managers = self._custom(world, MANAGERS)
        for manager in managers:
            state, message = status(manager).get("state", ""), status(manager).get("message", "")
            if state not in TERMINAL or (state == "error" and not message):
                late.append(f"manager {state or 'new'} ({message!r})")
        names = {v["metadata"]["name"] for v in volumes(sandbox)}
        for upgrade in self._custom(world, NODE_UPGRADES):
            name, state = upgrade["metadata"]["name"], status(upgrade).get("state", "")
            if state not in TERMINAL:
                late.append(f"{name} {state or 'new'} ({status(upgrade).get('message', '')!r})")
            for volume, held in sorted((status(upgrade).get("volumes") or {}).items()):
                if volume not in names:
                    late.append(f"{name} lists deleted volume {volume} as {held.get('state')!r}")
        for node in sandbox.emulator.list(LONGHORN, "nodes", sandbox.namespace):
            for condition in status(node).get("conditions") or []:
                if (
                    condition.get("type") == FLAG
                    and condition.get("status") == "True"
                    and not [
                        u
                        for u in self._custom(world, NODE_UPGRADES)
                        if status(u).get("state") not in TERMINAL
                    ]
                ):
                    late.append(f"{node['metadata']['name']} still flagged {FLAG}")
        for volume in volumes(sandbox):
            if volume["spec"].get("dataEngine") != "v2":
                continue
            held = status(volume)
            want = "attached" if volume["spec"].get("nodeID") else "detached"
            if held.get("state") != want or (want == "attached" and held.get("robustness") != "healthy"):
                late.append(f"{volume['metadata']['name']} {held.get('state')}/{held.get('robustness')}")
        return Progress(not late, "; ".join(late))

    async def violations(self, world: World) -> list[str]:
        """The v2 invariants' verdicts, but for the detach of a volume the cell itself deleted or
        whose node it disturbed (Longhorn detaches after a crash), and for a node upgrade ending
        unnamed by a manager the cell deleted (it has none to name it)."""
        gone = tuple(f"volumes/{name})" for name in world.safety.released)
        crashed = tuple(f"while asked onto {node}" for node in world.safety.crashed_nodes)
        return [
            v
            for v in self.observer.violations
            if not any(g in v for g in gone)
            and not (self.manager_deleted and "before manager" in v)
            and not any(c in v for c in crashed)
        ]

    def known(self, cell: Cell, detail: str) -> str:
        if "NotReady" in detail and "deleted while its node" in detail:
            return "issue 24 fix: v2-upgrade carried on while its node was NotReady"
        if cell.fault == "target-deleted" and cell.state.startswith("node:") and "not finished" in detail:
            return "issue 24 fix: a NodeDataEngineUpgrade deleted mid-flight stalls the upgrade"
        if "lists deleted volume" in detail:
            return "issue 24 fix: a volume deleted mid-upgrade stays in status.volumes as error"
        return ""

    def event_subjects(self, world: World) -> list[str]:
        sandbox = world.sandbox
        found = [
            subject("dataengineupgrademanager", sandbox, MANAGER),
            subject("node", sandbox, world.target["node"]),
        ]
        if world.target.get("upgrade"):
            found.append(subject("nodedataengineupgrade", sandbox, world.target["upgrade"]))
        return found

    async def _delete(self, world: World, plural: str, name: str) -> None:
        await world.sandbox.objects_api.delete_namespaced_custom_object(
            CORRAL_GROUP, CORRAL_VERSION, world.sandbox.namespace, plural, name
        )

    async def delete_target(self, world: World) -> Clear:
        """A node step: its NodeDataEngineUpgrade deleted; a manager state: the manager deleted."""
        upgrade = world.target.get("upgrade", "")
        if upgrade:
            await self._delete(world, NODE_UPGRADES, upgrade)
        else:
            self.manager_deleted = True
            await self._delete(world, MANAGERS, MANAGER)

        return nothing_to_clear

    async def change_target(self, world: World) -> Clear:
        """Someone else's write on the CR the state is about (its resourceVersion moves)."""
        upgrade = world.target.get("upgrade", "")
        plural, name = (NODE_UPGRADES, upgrade) if upgrade else (MANAGERS, MANAGER)
        await world.sandbox.objects_api.patch_namespaced_custom_object(
            CORRAL_GROUP,
            CORRAL_VERSION,
            world.sandbox.namespace,
            plural,
            name,
            {"metadata": {"annotations": {"explore/touched": "yes"}}},
            _content_type="application/merge-patch+json",  # type: ignore[call-arg]
        )

        return nothing_to_clear

    async def change_setting(self, world: World) -> Clear:
        """The operator moves the target image on again mid-upgrade (V2U-17's move)."""
        await pull_image(world.sandbox, NEWER_IM)
        await set_target_image(world.sandbox, NEWER_IM)

        return nothing_to_clear
