"""From a Seed to the objects a cluster starts with, and onto an API server.

Only what an operator or Longhorn's installer would create is written directly — kube and Longhorn
nodes, settings, engine images, volumes (asking to be attached where the seed says). Everything that
Longhorn's controllers grow from those (engines, replicas, instance managers and their pods, every
status) is left to the simulator: `bootstrap` runs it in stepped mode on a manual clock until the
cluster is quiet, so a seeded cluster is exactly what the simulator would have made of it, and the
same seed always makes the same cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from typing import Any

from kubernetes_asyncio import client

from corral_sandbox.seeds.model import GenerateSeed, Seed, VolumeSeed
from corral_sandbox.seeds.real_objects import apply_objects
from corral_sandbox.simulator import objects
from corral_sandbox.simulator.clock import ManualClock
from corral_sandbox.simulator.config import SimConfig
from corral_sandbox.simulator.kubeio import KubeIO
from corral_sandbox.simulator.runner import Simulator
from corral_sandbox.simulator.settings import DEFAULTS, setting_object
from corral_sandbox.simulator.volumes import parse_size

Obj = dict[str, Any]


def resized(
    seed: Seed, *, nodes: int | None = None, volumes: int | None = None, rng_seed: int | None = None
) -> Seed:
    """The seed with a different node count, generated-volume count or RNG seed (CLI overrides)."""
    changed = seed
    if nodes is not None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        from corral_sandbox.seeds.model import NodeSeed

        kept = list(seed.nodes[:nodes])
        kept += [NodeSeed(f"node-{i}") for i in range(len(kept) + 1, nodes + 1)]
        names = {n.name for n in kept}
        explicit = tuple(v for v in seed.volumes if not v.attached_to or v.attached_to in names)
        changed = dataclasses.replace(changed, nodes=tuple(kept), volumes=explicit)
    if volumes is not None:
        if volumes < 0:
            raise ValueError("the volume count cannot be negative")
        explicit = changed.volumes[:volumes]
        generated = dataclasses.replace(changed.generate, volumes=volumes - len(explicit))
        changed = dataclasses.replace(changed, volumes=explicit, generate=generated)
    if rng_seed is not None:
        changed = dataclasses.replace(changed, seed=rng_seed)
    return changed


def all_volumes(seed: Seed) -> list[VolumeSeed]:
    """Explicit volumes plus generated ones (`vol-0001`…), attachments spread over the nodes."""
    generate: GenerateSeed = seed.generate
    rng = random.Random(seed.seed)
    count = generate.volumes
    attached = set(rng.sample(range(count), round(count * max(0.0, min(1.0, generate.attached_ratio)))))
    nodes = [n.name for n in seed.nodes if n.ready]
    taken = {v.name for v in seed.volumes}
    result = list(seed.volumes)
    index = 0
    for i in range(count):
        index += 1
        while f"vol-{index:04d}" in taken:
            index += 1
        node = nodes[i % len(nodes)] if i in attached and nodes else ""
        result.append(
            VolumeSeed(f"vol-{index:04d}", replicas=generate.replicas, size=generate.size, attached_to=node)
        )
    return result


def base_objects(seed: Seed) -> list[tuple[str, Obj]]:
    """The installer's and operator's objects, in creation order, as (kind token, object)."""
    ns = seed.namespace
    found: list[tuple[str, Obj]] = []
    for node in seed.nodes:
        found.append(
            (
                "kubenode",
                objects.kube_node(
                    node.name,
                    cpu=node.cpu,
                    labels=node.labels,
                    ready=node.ready,
                    cordoned=node.cordoned,
                    hugepages=node.hugepages,
                    hugepages_allocatable=node.hugepages_allocatable,
                    images=[seed.default_engine_image, seed.instance_manager_image],
                ),
            )
        )
        found.append(
            (
                "node",
                objects.longhorn_node(
                    node.name,
                    ns,
                    ready=node.ready,
                    schedulable=node.schedulable,
                    im_cpu_request=node.im_cpu_request,
                ),
            )
        )
    values = {
        **DEFAULTS,
        "default-engine-image": seed.default_engine_image,
        "default-instance-manager-image": seed.instance_manager_image,
        "current-longhorn-version": seed.longhorn_version,
        **seed.settings,
    }
    for name in sorted(values):
        found.append(("setting", setting_object(name, values[name], ns)))
    for ei in seed.engine_images:
        found.append(("engineimage", objects.engine_image(ei.image, ns)))
    for volume in all_volumes(seed):
        size = parse_size(volume.size)
        if not size:
            raise ValueError(f"volume {volume.name}: size {volume.size!r} is not a size")
        found.append(
            (
                "volume",
                objects.volume(
                    volume.name,
                    ns,
                    # a v2 volume's image is the instance-manager image its engine runs in
                    image=volume.image
                    or (
                        seed.instance_manager_image
                        if volume.data_engine == "v2"
                        else seed.default_engine_image
                    ),
                    size=str(size),
                    replicas=volume.replicas,
                    node_id=volume.attached_to,
                    data_engine=volume.data_engine,
                    standby=volume.standby,
                    data_locality=volume.data_locality,
                ),
            )
        )
    return found


async def apply_seed(api: client.ApiClient, seed: Seed) -> int:
    """Create the seed's base objects through the API (status written through /status); returns a count."""
    io = KubeIO(api, seed.namespace)
    found = base_objects(seed)
    gate = asyncio.Semaphore(16)

    async def put(kind: str, obj: Obj) -> None:
        async with gate:
            created = await io.create(kind, obj)
            if kind in ("node", "setting") and obj.get("status"):
                await io.patch(kind, created["metadata"]["name"], {"status": obj["status"]}, status=True)

    # kinds in order (engine images exist before the volumes that name them), objects of a kind at once
    for kind in dict.fromkeys(k for k, _ in found):
        await asyncio.gather(*(put(k, obj) for k, obj in found if k == kind))
    return len(found) + await apply_objects(api, seed.namespace, seed.objects)


async def bootstrap(api: client.ApiClient, seed: Seed, config: SimConfig | None = None) -> Simulator:
    """Let a stepped simulator on a manual clock grow the seeded cluster until it is quiet.

    Returns that simulator (its `digest()` identifies the cluster it made); it is not left running.
    """
    simulator = Simulator(api, config or seed.sim_config(), ManualClock())
    await simulator.settle(advance=True)
    return simulator
