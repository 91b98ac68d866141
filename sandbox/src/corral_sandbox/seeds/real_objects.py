"""Real Longhorn objects in a seed: what `kubectl get -o yaml` printed on a real cluster (the
objects of tests/data/corpus, say), loaded into the sandbox as they are, status included.

A seed describes a cluster the simulator grows; real objects bring the shapes a real cluster has
(literal nulls, absent omitempty fields, quoted sizes, fields the sandbox never writes) into it, so
corral can be run against them. Only what the API server would not take from a client is dropped
(uid, resourceVersion, creationTimestamp, generation, managedFields, selfLink, ownerReferences to
objects that are not there); the namespace becomes the seed's. The API server then prunes nulls
from non-nullable fields, as a real one did before the object was printed. Longhorn ≤ 1.8's
`longhorn.io/v1beta1` objects are refused: the sandbox serves only v1beta2, as Longhorn ≥ 1.10 does.
"""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from corral_sandbox.simulator.kubeio import KubeIO
from corral_sandbox.simulator.view import KIND_NAMES, KINDS

Obj = dict[str, Any]
_SERVER_META = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink")
# kinds in the order a cluster makes them: what an object names exists before it
_ORDER = ("setting", "node", "engineimage", "instancemanager", "volume", "engine", "replica")
_KIND_BY_NAME = {
    name: kind
    for kind, name in KIND_NAMES.items()
    # snapshots are the v2 upgrade's, made while it runs, never part of a cluster's starting state
    if KINDS[kind][0] == "longhorn.io" and kind != "snapshot"
}


class ObjectSeedError(ValueError):
    pass


def is_object(doc: Any) -> bool:
    """Whether a YAML document is a Kubernetes object or List rather than a seed mapping."""
    return isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc


def flatten(docs: list[Any]) -> list[Any]:
    """Objects and `kind: List`s (as `kubectl get -o yaml` prints several) as one list of objects."""
    out: list[Any] = []
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out.extend(doc.get("items") or [])
        elif doc is not None:
            out.append(doc)
    return out


def parse_objects(raw: Any, where: str) -> tuple[Obj, ...]:
    """The seed's `objects:`: each a Longhorn v1beta2 object of a kind the sandbox serves."""
    if not isinstance(raw, list):
        raise ObjectSeedError(f"{where}: must be a list of Kubernetes objects")
    out = []
    for i, obj in enumerate(flatten(raw)):
        at = f"{where}[{i}]"
        if not is_object(obj):
            raise ObjectSeedError(f"{at}: not a Kubernetes object (apiVersion and kind are required)")
        if obj["apiVersion"] == "longhorn.io/v1beta1":
            raise ObjectSeedError(f"{at}: longhorn.io/v1beta1 (Longhorn <= 1.8) is not served; v1beta2 only")
        if obj["apiVersion"] != "longhorn.io/v1beta2" or obj["kind"] not in _KIND_BY_NAME:
            kinds = ", ".join(sorted(_KIND_BY_NAME))
            raise ObjectSeedError(
                f"{at}: {obj['apiVersion']} {obj['kind']}: only longhorn.io/v1beta2 {kinds}"
            )
        if not isinstance(obj.get("metadata"), dict) or not obj["metadata"].get("name"):
            raise ObjectSeedError(f"{at}: metadata.name is required")
        out.append(obj)
    return tuple(out)


def as_created(obj: Obj, namespace: str) -> Obj:
    """The object as a client may create it: server-set metadata dropped, in the seed's namespace."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in _SERVER_META and k != "ownerReferences"}
    meta["namespace"] = namespace
    return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}


async def apply_objects(api: client.ApiClient, namespace: str, objects: tuple[Obj, ...]) -> int:
    """Create the objects through the API, then put each status as given (nulls kept: a JSON Patch,
    since a merge patch's null would delete); returns how many."""
    io = KubeIO(api, namespace)
    ordered = sorted(objects, key=lambda o: _ORDER.index(_KIND_BY_NAME[o["kind"]]))
    for obj in ordered:
        kind = _KIND_BY_NAME[obj["kind"]]
        created = await io.create(kind, as_created(obj, namespace))
        if isinstance(obj.get("status"), dict):
            await io.put_status(kind, created["metadata"]["name"], obj["status"])
    return len(ordered)
