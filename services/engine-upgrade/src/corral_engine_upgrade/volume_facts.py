"""How this service decodes a Volume: the metadata its rules read, and nothing else of it.

A cold start decodes every Volume of the cluster (100 k of them) before it may decide, and the
shared slim `lh.Volume` also decodes the labels, finalizers, owner references and creation time
the watcher publishes: a dict, a tuple and strings per volume that the rules never read (records.py
takes uid, generation and annotations), a quarter of the decoding (3.2 µs a volume against 4.0;
issue 28). Unknown fields are skipped without being built, so `VolumeMeta` keeps only what
`VolumeRecord.update_from` reads, with `lh.ObjectMeta`'s own types and defaults for those.

Everything else in the service also accepts the shared slim `lh.Volume` (tests, snapshots for
`corral plan`, the simulator's objects), as it does `lh.EngineImage` beside its own EngineImageFacts.
"""

from __future__ import annotations

import msgspec

from corral_model import longhorn as lh


class VolumeMeta(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True, gc=False):
    """The part of a Volume's metadata the rules read (and its name, for whoever prints one)."""

    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    annotations: dict[str, str] = {}


class VolumeFacts(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True, gc=False):
    """A Volume as the engine-upgrade service decodes it from LH_OBJECTS."""

    metadata: VolumeMeta
    spec: lh.VolumeSpec = lh.VolumeSpec()
    status: lh.VolumeStatus = lh.VolumeStatus()


# What the view takes as a Volume.
AnyVolume = VolumeFacts | lh.Volume
