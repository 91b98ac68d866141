"""How this service decodes an EngineImage: its nodeDeploymentMap kept as raw JSON.

An EngineImage carries one entry per node (1 k of them on a large cluster), and every upgrade
moves its refCount, so it is updated all through a wave while the facts the rules read (which
nodes it is ready on) almost never change. Decoding the map into a dict costs ~150 µs at 1 k
nodes and comparing two such dicts ~20 µs; kept as the raw JSON the watcher published (the map's
keys in the API server's order), decoding it costs nothing and telling that it did not change is
one byte comparison. The map is decoded only when its bytes differ (records.ImageRecord).

Everything else in the service also accepts the shared slim `lh.EngineImage` (tests, snapshots
for `corral plan`, the simulator's objects), whose map is a dict.
"""

from __future__ import annotations

import msgspec

from corral_model import longhorn as lh

# A map as decoded from the bus (raw JSON) or as built in memory.
NodeMap = dict[str, bool] | msgspec.Raw

_EMPTY = msgspec.Raw(b"{}")
# The map is `nullable: true` in Longhorn's CRD: the raw bytes may be `null`, read as no node.
_decode_map = msgspec.json.Decoder(dict[str, bool] | None).decode


class DeploymentStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """The part of EngineImage.status the rules read."""

    state: str = ""
    incompatible: bool = False
    node_deployment_map: msgspec.Raw = _EMPTY
    controller_api_version: int = msgspec.field(default=0, name="controllerAPIVersion")
    controller_api_min_version: int = msgspec.field(default=0, name="controllerAPIMinVersion")


class EngineImageFacts(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """An EngineImage as the engine-upgrade service decodes it from LH_OBJECTS."""

    metadata: lh.ObjectMeta
    spec: lh.EngineImageSpec = lh.EngineImageSpec()
    status: DeploymentStatus = DeploymentStatus()


# What the view takes as an EngineImage.
AnyEngineImage = EngineImageFacts | lh.EngineImage


def node_map(deployment: NodeMap) -> dict[str, bool]:
    """The map as a dict, decoding raw JSON (raises msgspec.ValidationError / DecodeError)."""
    if isinstance(deployment, msgspec.Raw):
        return _decode_map(deployment) or {}
    return deployment
