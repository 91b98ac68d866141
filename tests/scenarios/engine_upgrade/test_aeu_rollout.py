"""AEU-21, the system-upgrade race (acceptance-scenarios.md §1.3; Longhorn's T1.5, skipped upstream
as a TODO, and T1.7): the limit is above 0 before Longhorn is upgraded; the rollout (SIM-VER) switches
`default-engine-image` before the new engine image even exists, the new default instance managers
take a while to start (SIM-IM start delay), and some volumes are attaching meanwhile.

Longhorn's rule for starting an automatic upgrade is the engine image's deployment on the volume's
nodes (longhorn-behaviour.md §1.3 c/d); whether the new instance manager runs is not part of it — a
live upgrade started early simply waits for its new replicas to start. So the scenario asserts:
* at every observation: In-flight(n) ≤ limit per owner node; no volume faulted; the volumes attached
  before the rollout stay attached and healthy; no volume asks for the new image before it is
  deployed on the volume's nodes; a volume attaching after the rollout is attached only once the new
  instance managers on its nodes run, and a live upgrade completes only once those on its replica
  nodes do (the simulator's side of the race);
* exactly, from the watch recordings (global resourceVersion order): when each volume's spec.image
  became the new image, it was attached or detached (not attaching) and the API server's
  EngineImage already showed the image deployed on the volume's attached node and replica nodes;
* that the race happened: a live upgrade was in flight while the new instance manager on one of the
  volume's replica nodes was still starting, and the late volumes were seen waiting to attach;
* at the end: every v1 volume runs the new engine image, attached ones healthy; the old image is free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from corral_sandbox.simulator import ImageProfile, LonghornRelease, ManagerVersions, SimConfig, roll_out
from corral_sandbox.simulator.objects import engine_image_name
from tests.fixtures.sandbox import DEFAULT_IMAGE, Sandbox, fast_config
from tests.scenarios.engine_upgrade.conftest import Running
from tests.scenarios.engine_upgrade.scenario import LIMIT_SETTING, Observer, upgrading

pytestmark = pytest.mark.scenario

NEW_IMAGE = "longhornio/longhorn-engine:v1.11.0"
NEW_IM_IMAGE = "longhornio/longhorn-instance-manager:v1.11.0"
V1_11 = ManagerVersions(cli_api_version=11, cli_api_min_version=8, controller_api_version=6)
RELEASE = LonghornRelease("v1.11.0", NEW_IMAGE, NEW_IM_IMAGE, manager=V1_11)
LIMIT = 2
NODES = ("node-1", "node-2", "node-3")
ATTACHED = {f"vol-{node}-{i}": node for node in NODES for i in range(2)}  # two owned by each node
DETACHED = ["vol-off-0", "vol-off-1"]
ATTACHING = {"vol-late-0": "node-1", "vol-late-1": "node-3"}


@pytest.fixture
def sandbox_config() -> SimConfig:
    return fast_config(
        live_upgrade_seconds=0.6,
        engine_image_deploy_seconds=0.3,
        im_startup_seconds=2.0,
        images={
            NEW_IMAGE: ImageProfile(
                version="v1.11.0", cli_api_version=11, cli_api_min_version=8, controller_api_version=6
            )
        },
    )


def state(volume: dict[str, Any]) -> tuple[str, str]:
    st = volume.get("status", {})
    return st.get("state", ""), st.get("robustness", "")


def version(obj: dict[str, Any]) -> int:
    return int(obj["metadata"]["resourceVersion"])


class Watch:
    """What every observation of the emulator showed, and the invariants checked on each."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.in_flight = Observer(sandbox)
        self.race_seen = False
        self.attaching_seen: set[str] = set()

    async def new_managers_up(self) -> dict[str, bool]:
        """Node → whether the new default instance manager there is running."""
        up = dict.fromkeys(NODES, False)
        for im in await self.sandbox.list("instancemanagers"):
            if im["spec"]["image"] == NEW_IM_IMAGE:
                up[im["spec"]["nodeID"]] = im.get("status", {}).get("currentState") == "running"
        return up

    async def check(self) -> None:
        await self.in_flight.limit_holds(LIMIT)()
        volumes = await self.sandbox.list("volumes")
        ei = await self.sandbox.find("engineimages", engine_image_name(NEW_IMAGE))
        deployed = (ei or {}).get("status", {}).get("nodeDeploymentMap") or {}
        up = await self.new_managers_up()
        for volume in volumes:
            name = volume["metadata"]["name"]
            replica_nodes = await self.replica_nodes(name)
            assert state(volume)[1] != "faulted", f"{name} faulted: {volume['status']}"
            if name in ATTACHED:
                assert state(volume) == ("attached", "healthy"), f"{name} disturbed: {volume['status']}"
            if name in ATTACHING:
                # the processes of a volume attaching after the rollout start in the new IMs only
                nodes = replica_nodes | {volume["spec"]["nodeID"]}
                if state(volume)[0] == "attached":
                    assert all(up[n] for n in nodes), f"{name} attached before the new IMs on {nodes} ran"
                elif state(volume)[0] == "attaching" and not all(up[n] for n in nodes):
                    self.attaching_seen.add(name)
            if volume["spec"]["image"] == NEW_IMAGE:
                nodes = await self.nodes_of(volume)
                missing = [n for n in nodes if not deployed.get(n)]
                assert not missing, f"{name} asks for {NEW_IMAGE}, not deployed on {missing}"
                live = state(volume)[0] == "attached"
                if live and upgrading(volume) and not all(up[n] for n in replica_nodes):
                    self.race_seen = True  # its new replicas have no IM to start in yet
                if live and not upgrading(volume):
                    assert all(up[n] for n in replica_nodes), f"{name} upgraded without the new IMs"

    async def replica_nodes(self, name: str) -> set[str]:
        return {r["spec"]["nodeID"] for r in await self.sandbox.replicas_of(name) if r["spec"].get("nodeID")}

    async def nodes_of(self, volume: dict[str, Any]) -> set[str]:
        """The nodes "image ready on all volume replicas" looks at: replicas' and the attached one."""
        current = volume.get("status", {}).get("currentNodeID", "")
        return await self.replica_nodes(volume["metadata"]["name"]) | ({current} if current else set())


async def create_volumes(sandbox: Sandbox) -> None:
    for name, node in ATTACHED.items():
        await sandbox.create_volume(name, replicas=2, node=node)
    for name in [*DETACHED, *ATTACHING]:
        await sandbox.create_volume(name, replicas=2)
    for name in ATTACHED:
        await sandbox.wait_volume(name, lambda v: state(v) == ("attached", "healthy"), within=20)
    for name in [*DETACHED, *ATTACHING]:
        await sandbox.wait_volume(name, lambda v: state(v)[0] == "detached", within=20)


def asking_for_new(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda v: bool(v["metadata"]["name"] == name and v["spec"].get("image") == NEW_IMAGE)


def first_asking(versions: Iterable[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The first recorded version of volume `name` whose spec.image is the new image."""
    ordered = sorted((v for v in versions if v["metadata"]["name"] == name), key=version)
    return next((v for v in ordered if v["spec"].get("image") == NEW_IMAGE), None)


def engine_image_at(versions: Iterable[dict[str, Any]], before: int) -> dict[str, Any] | None:
    """The new EngineImage as the API server held it just before resourceVersion `before`."""
    held = [e for e in versions if e["spec"].get("image") == NEW_IMAGE and version(e) < before]
    return max(held, key=version, default=None)


async def test_aeu_21_system_upgrade_race(sandbox: Sandbox, stack: list[Running]) -> None:
    await create_volumes(sandbox)
    await sandbox.set_setting(LIMIT_SETTING, str(LIMIT))
    watch = Watch(sandbox)
    everything = {*ATTACHED, *DETACHED, *ATTACHING}

    async with (
        sandbox.recording("volumes") as volume_versions,
        sandbox.recording("engineimages") as ei_versions,
    ):
        await roll_out(sandbox.simulator, RELEASE)
        for name, node in ATTACHING.items():
            await sandbox.patch("volumes", name, {"spec": {"nodeID": node}})

        async def all_on_new() -> bool:
            volumes = {v["metadata"]["name"]: v for v in await sandbox.list("volumes")}
            return all(
                volumes[n]["spec"]["image"] == NEW_IMAGE
                and volumes[n]["status"].get("currentImage") == NEW_IMAGE
                for n in everything
            )

        await sandbox.wait_for(
            all_on_new, within=45, interval=0.05, what=f"every volume on {NEW_IMAGE}", invariant=watch.check
        )
        for name in everything:
            await sandbox.wait_recorded(volume_versions, asking_for_new(name), what=f"{name} recorded")

    assert watch.race_seen, "no live upgrade ran while a new instance manager it needs was still starting"
    assert watch.attaching_seen == set(ATTACHING), f"attaching during the race: {watch.attaching_seen}"
    for name in sorted(everything):
        asked = first_asking(volume_versions, name)
        assert asked is not None
        assert state(asked)[0] in ("attached", "detached"), f"{name} upgraded while {state(asked)[0]}"
        ei = engine_image_at(ei_versions, version(asked))
        assert ei is not None, f"{name} asked for {NEW_IMAGE} before its EngineImage existed"
        deployed = ei.get("status", {}).get("nodeDeploymentMap") or {}
        nodes = await watch.nodes_of(asked)
        assert nodes and all(deployed.get(n) for n in nodes), (
            f"{name} asked at rv {version(asked)}; deployed then: {deployed}, its nodes {nodes}"
        )

    for name in [*ATTACHED, *ATTACHING]:
        volume = await sandbox.wait_volume(name, lambda v: state(v) == ("attached", "healthy"), within=10)
        assert volume["status"]["currentImage"] == NEW_IMAGE
        replicas = await sandbox.replicas_of(name)
        assert len(replicas) == 2 and all(r["status"].get("currentImage") == NEW_IMAGE for r in replicas)
    for name in DETACHED:
        assert state(await sandbox.get("volumes", name))[0] == "detached"
        assert all(r["spec"]["image"] == NEW_IMAGE for r in await sandbox.replicas_of(name))

    async def old_image_free() -> bool:
        old = await sandbox.engine_image(DEFAULT_IMAGE)
        return bool(old.get("status", {}).get("refCount") == 0 and old["status"].get("noRefSince"))

    await sandbox.wait_for(old_image_free, within=10, what="the old engine image's refCount at 0")
