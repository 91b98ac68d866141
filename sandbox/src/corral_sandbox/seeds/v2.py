"""A v2 data-engine cluster in one call, for the v2 upgrade's conformance checks, scenarios and bench:
N nodes with hugepages and the v2 data engine on, M attached v2 volumes with R replicas each (one per
node, hard anti-affinity), their engines on the nodes named, plus detached v2 and v1 volumes.

    seed = v2_seed(nodes=5, volumes=50, attached_to="node-1")            # every engine on node-1
    seed = v2_seed(nodes=3, volumes=3, attached_to=("node-1", "node-2"))  # engines spread in turn

Volumes are `v2-vol-001`…, `v2-detached-001`…, `v1-vol-001`… (v1 ones attached to the first node).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from corral_sandbox.seeds.model import Seed, seed_from_dict

V2_SETTINGS = {"v2-data-engine": "true"}


def v2_seed(
    nodes: int = 3,
    volumes: int = 3,
    *,
    replicas: int = 3,
    attached_to: str | Sequence[str] = "node-1",
    detached: int = 0,
    v1_volumes: int = 0,
    hugepages: str = "4Gi",
    settings: dict[str, str] | None = None,
    seed: int = 0,
) -> Seed:
    names = [f"node-{i}" for i in range(1, nodes + 1)]
    owners = [attached_to] if isinstance(attached_to, str) else list(attached_to)
    unknown = sorted(set(owners) - set(names))
    if unknown or not owners:
        raise ValueError(f"attached_to must name nodes of the cluster ({names}), not {unknown or owners}")
    listed: list[dict[str, Any]] = [
        {
            "name": f"v2-vol-{i + 1:03d}",
            "replicas": replicas,
            "dataEngine": "v2",
            "attachedTo": owners[i % len(owners)],
        }
        for i in range(volumes)
    ]
    listed += [
        {"name": f"v2-detached-{i + 1:03d}", "replicas": replicas, "dataEngine": "v2"}
        for i in range(detached)
    ]
    listed += [
        {"name": f"v1-vol-{i + 1:03d}", "replicas": min(replicas, nodes), "attachedTo": names[0]}
        for i in range(v1_volumes)
    ]
    return seed_from_dict(
        {
            "seed": seed,
            "nodes": [{"name": n, "hugepages": hugepages} for n in names],
            "settings": {**V2_SETTINGS, **(settings or {})},
            "volumes": listed,
        },
        "<v2_seed>",
    )
