"""The pipeline bench's cluster, as the API server holds it, and the changes it goes through.

Every volume is attached, on the old engine image and `degraded`, so engine-upgrade holds them all
back (§1.3: a live upgrade wants a healthy volume) although the default image is the new one and
the per-node limit is high. A realistic change is a status update of a degraded volume (its
`actualSize` grows, as a volume being written to does); one change in a hundred is a rebuild
finishing instead (`robustness: healthy`), which makes that volume eligible, and the whole chain
then ends in the actuator's `spec.image` patch. A volume that turned healthy is never changed by
the churn again, so the churn cannot undo the patch.
"""

from __future__ import annotations

import copy
import random
from typing import Any

from bench.bench_sandbox import ENGINE_IMAGE
from bench.bench_sandbox import volume as sandbox_volume
from corral_sandbox.simulator import objects

NS = "longhorn-system"
OLD_IMAGE = ENGINE_IMAGE
NEW_IMAGE = "longhornio/longhorn-engine:v1.8.0"
LIMIT = 1000  # never the bottleneck: the bench measures the chain, not the limit

Obj = dict[str, Any]


def node_name(index: int) -> str:
    return f"node-{index}"  # as bench_sandbox.volume names them


def setting(name: str, value: str) -> Obj:
    return {
        "apiVersion": objects.LONGHORN,
        "kind": "Setting",
        "metadata": {"name": name, "namespace": NS},
        "value": value,
    }


def engine_image(image: str, nodes: int, api_version: int) -> Obj:
    obj = objects.engine_image(image, NS)
    obj["status"] = {
        "state": "deployed",
        "refCount": 0,
        "noRefSince": "",
        "incompatible": False,
        "controllerAPIVersion": api_version,
        "controllerAPIMinVersion": 3,
        "cliAPIVersion": 8,
        "cliAPIMinVersion": 3,
        "dataFormatVersion": 1,
        "dataFormatMinVersion": 1,
        "nodeDeploymentMap": {node_name(n): True for n in range(nodes)},
        "conditions": [],
    }
    return obj


def volume(index: int, nodes: int) -> Obj:
    return sandbox_volume(index, nodes=nodes, robustness="degraded")


def base_objects(nodes: int) -> dict[tuple[str, str], list[Obj]]:
    """(group, plural) → objects: the Longhorn nodes, the settings and both engine images."""
    return {
        ("longhorn.io", "nodes"): [objects.longhorn_node(node_name(n), NS) for n in range(nodes)],
        ("longhorn.io", "settings"): [
            setting("default-engine-image", NEW_IMAGE),
            setting("concurrent-automatic-engine-upgrade-per-node-limit", str(LIMIT)),
        ],
        ("longhorn.io", "engineimages"): [
            engine_image(OLD_IMAGE, nodes, 8),
            engine_image(NEW_IMAGE, nodes, 9),
        ],
    }


class Churn:
    """The changes of a steady load: which volume changes next, and how."""

    def __init__(self, volumes: int, nodes: int, seed: int = 18) -> None:
        self.rng = random.Random(seed)
        self.nodes = nodes
        self.degraded = list(range(volumes))
        self.rng.shuffle(self.degraded)
        self._templates: dict[int, Obj] = {}
        self._eligible_debt = 0.0

    def _template(self, index: int) -> Obj:
        found = self._templates.get(index)
        if found is None:
            found = self._templates[index] = volume(index, self.nodes)
        return found

    def changes(self, count: int, eligible_share: float) -> tuple[list[Obj], list[str]]:
        """`count` changed volumes, and the names of those among them that turned healthy."""
        self._eligible_debt += count * eligible_share
        flips = min(int(self._eligible_debt), count, len(self.degraded) - 1)
        self._eligible_debt -= flips
        changed: list[Obj] = []
        healthy: list[str] = []
        for _ in range(flips):
            index = self.degraded.pop()
            obj = copy.deepcopy(self._template(index))
            obj["status"]["robustness"] = "healthy"
            self._templates.pop(index, None)
            changed.append(obj)
            healthy.append(obj["metadata"]["name"])
        pool = self.degraded
        for _ in range(count - flips):
            obj = self._template(pool[self.rng.randrange(len(pool))])
            obj["status"]["actualSize"] += 4096
            changed.append(obj)
        return changed, healthy
