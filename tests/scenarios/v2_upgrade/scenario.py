"""What the v2-upgrade scenarios do to the sandbox and read back from it: the operator's manager
CR, the new instance-manager image (set as longhorn-manager sets it), the kubelet's list of pulled
images, and the upgrade CRs as the API server holds them. Reads go through kubernetes-asyncio, never
a service's own view.

The cluster every scenario starts from (`v2_seed`): three nodes with v2 enabled and hugepages, the
old IM image everywhere, and whatever volumes the scenario asks for. `start_upgrade` then plays the
operator of the §5.4 fixture: the new default IM image is pulled on every node and set, and a
DataEngineUpgradeManager is created.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from corral_model.kinds import CORRAL_GROUP, CORRAL_VERSION
from corral_sandbox.control import SandboxControl
from corral_sandbox.seeds.model import Seed, VolumeSeed
from corral_sandbox.seeds.v2 import v2_seed as sandbox_v2_seed
from corral_v2_upgrade import states
from tests.fixtures.sandbox import Sandbox
from tests.scenarios.v2_upgrade.invariants import MANAGERS, NODE_UPGRADES
from tests.scenarios.v2_upgrade.observer import UpgradeObserver

OLD_IM = "longhornio/longhorn-instance-manager:v1.10.0"
NEW_IM = "longhornio/longhorn-instance-manager:v1.10.1"
NEWER_IM = "longhornio/longhorn-instance-manager:v1.10.2"
TARGET_SETTING = "default-instance-manager-image"
DISABLE_V2_LABEL = "node.longhorn.io/disable-v2-data-engine"
NODES = ("node-1", "node-2", "node-3")
MANAGER = "upgrade"
NODE_STEPS = tuple(str(step) for step in (*states.NODE_STEPS[1:], states.UpgradeState.COMPLETED))


def v2_volume(name: str, owner: str = "node-1", replicas: int = 3, attached: bool = True) -> VolumeSeed:
    """A v2 volume attached to (its engine on) `owner`, or detached, with `replicas` replicas."""
    return VolumeSeed(name, replicas=replicas, attached_to=owner if attached else "", data_engine="v2")


def v1_volume(name: str, owner: str = "node-1", replicas: int = 2) -> VolumeSeed:
    return VolumeSeed(name, replicas=replicas, attached_to=owner)


def v2_seed(
    volumes: Iterable[VolumeSeed] = (), labels: dict[str, dict[str, str]] | None = None, nodes: int = 3
) -> Seed:
    """The sandbox's v2 cluster (`corral_sandbox.seeds.v2`: v2-enabled nodes with hugepages, the old
    IM image) with exactly `volumes`; `labels`: node → extra Kubernetes labels (disable-v2, say)."""
    base = sandbox_v2_seed(nodes=nodes, volumes=0)
    node_seeds = tuple(
        dataclasses.replace(n, labels={**n.labels, **(labels or {}).get(n.name, {})}) for n in base.nodes
    )
    assert base.instance_manager_image == OLD_IM
    return dataclasses.replace(base, nodes=node_seeds, volumes=tuple(volumes))


# --- the operator's moves ---------------------------------------------------------------------------


async def pull_image(sandbox: Sandbox, image: str, nodes: Iterable[str] = ()) -> None:
    """The kubelet reports `image` among the pulled images (`status.images`) of `nodes` (default:
    every node), as after a pre-pull DaemonSet ran there (through the simulator's control, as any
    other SIM-K8S fact)."""
    control = SandboxControl.from_kubeconfig(sandbox.cluster.kubeconfig_path)
    for node in nodes or [n["metadata"]["name"] for n in await sandbox.list("nodes")]:
        await control.set_node_images(node, add=[image])


async def set_target_image(sandbox: Sandbox, image: str) -> None:
    """The new default instance-manager image, set as longhorn-manager sets it on an upgrade."""
    await sandbox.set_setting(TARGET_SETTING, image)


def manager_body(
    sandbox: Sandbox, name: str = MANAGER, nodes: Iterable[str] = (), start_time: str = ""
) -> dict[str, Any]:
    spec: dict[str, Any] = {"dataEngine": "v2", "nodes": list(nodes)}
    if start_time:
        spec["startTime"] = start_time
    return {
        "apiVersion": f"{CORRAL_GROUP}/{CORRAL_VERSION}",
        "kind": "DataEngineUpgradeManager",
        "metadata": {"name": name, "namespace": sandbox.namespace},
        "spec": spec,
    }


async def create_manager(
    sandbox: Sandbox, name: str = MANAGER, nodes: Iterable[str] = (), start_time: str = ""
) -> dict[str, Any]:
    obj: dict[str, Any] = await sandbox.objects_api.create_namespaced_custom_object(
        CORRAL_GROUP,
        CORRAL_VERSION,
        sandbox.namespace,
        MANAGERS,
        manager_body(sandbox, name, nodes, start_time),
    )
    return obj


async def start_upgrade(
    sandbox: Sandbox, image: str = NEW_IM, nodes: Iterable[str] = (), start_time: str = ""
) -> dict[str, Any]:
    """The §5.4 fixture's operator: once the seeded volumes are settled, the new image pulled
    everywhere and set, then the manager."""
    await settled(sandbox)
    await pull_image(sandbox, image)
    await set_target_image(sandbox, image)
    return await create_manager(sandbox, nodes=nodes, start_time=start_time)


async def settled(sandbox: Sandbox, within: float = 60.0) -> None:
    """Every volume asked onto a node is attached and healthy there, every other one detached."""

    async def probe() -> bool:
        for volume in await sandbox.list("volumes"):
            status = volume.get("status") or {}
            if volume["spec"].get("nodeID"):
                if status.get("state") != "attached" or status.get("robustness") != "healthy":
                    return False
            elif status.get("state") != "detached":
                return False
        return True

    await sandbox.wait_for(probe, within=within, what="the seeded volumes settled")


# --- reading the upgrade back -----------------------------------------------------------------------


async def manager(sandbox: Sandbox, name: str = MANAGER) -> dict[str, Any]:
    obj: dict[str, Any] = await sandbox.objects_api.get_namespaced_custom_object(
        CORRAL_GROUP, CORRAL_VERSION, sandbox.namespace, MANAGERS, name
    )
    return obj


async def node_upgrades(sandbox: Sandbox, node: str = "") -> list[dict[str, Any]]:
    """Every NodeDataEngineUpgrade (of `node`, when given), oldest first."""
    answer = await sandbox.objects_api.list_namespaced_custom_object(
        CORRAL_GROUP, CORRAL_VERSION, sandbox.namespace, NODE_UPGRADES
    )
    items = [u for u in answer["items"] if not node or u["spec"]["nodeID"] == node]
    return sorted(items, key=lambda u: int(u["metadata"]["resourceVersion"]))


def state(obj: dict[str, Any] | None) -> str:
    return str(((obj or {}).get("status") or {}).get("state", ""))


async def manager_state(sandbox: Sandbox, name: str = MANAGER) -> str:
    return state(await manager(sandbox, name))


async def v2_instance_managers(sandbox: Sandbox, node: str = "") -> list[dict[str, Any]]:
    return [
        im
        for im in await sandbox.list("instancemanagers")
        if im["spec"].get("dataEngine") == "v2" and (not node or im["spec"]["nodeID"] == node)
    ]


async def running_v2_im(sandbox: Sandbox, node: str, image: str) -> dict[str, Any] | None:
    """The node's v2 IM on `image` once it runs."""
    for im in await v2_instance_managers(sandbox, node):
        if im["spec"]["image"] == image and (im.get("status") or {}).get("currentState") == "running":
            return im
    return None


async def wait_manager(
    sandbox: Sandbox,
    observer: UpgradeObserver,
    wanted: str = "completed",
    within: float = 60.0,
    also: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """The manager once it reaches `wanted`, the invariants (and a scenario's own rule `also`)
    checked at every look; fails at once if it ends in the other terminal state."""

    async def invariant() -> None:
        await observer.holds()
        if also is not None:
            also()

    async def probe() -> dict[str, Any] | None:
        obj = await manager(sandbox)
        now = state(obj)
        if now in ("completed", "error") and now != wanted:
            raise AssertionError(f"manager ended {now}: {(obj.get('status') or {}).get('message')}")
        return obj if now == wanted else None

    return await sandbox.wait_for(
        probe, within=within, what=f"the manager {wanted}", invariant=observer.holds
    )
