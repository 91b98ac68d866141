"""A Volume decoded as `VolumeFacts` (volume_facts.py) gives its record exactly the facts the shared
`lh.Volume` gives: the fields it leaves out are ones the rules never read. And a record made in
one step (`VolumeRecord.new`, a bootstrap's) is the one `update_from` makes of a blank record."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from corral_engine_upgrade.records import NO_REPLICAS, ROLLBACK_APPROVED, ROLLED_BACK, VolumeRecord
from corral_engine_upgrade.view import KIND_STRUCTS
from corral_engine_upgrade.volume_facts import VolumeFacts
from corral_model import codec
from corral_model import longhorn as lh
from corral_model.envelopes import EventType, ObjectEvent
from tests.unit.engine_upgrade.cluster import NEW, OLD, volume

texts = st.sampled_from(["", "node-1", "node-2", OLD, NEW, "attached", "detached", "degraded", "healthy"])


def _record(obj: Any) -> dict[str, Any]:
    record = VolumeRecord(namespace="longhorn-system", name="v")
    record.update_from(obj, 7)
    made = VolumeRecord.new("longhorn-system", "v", obj, 7, NO_REPLICAS)
    assert msgspec.structs.asdict(made) == msgspec.structs.asdict(record)
    return msgspec.structs.asdict(record)


def _published(obj: lh.Volume) -> bytes:
    """As the watcher publishes a Volume: the whole slim object, labels and finalizers included."""
    event = ObjectEvent(
        type=EventType.MODIFIED,
        kind="volume",
        namespace="longhorn-system",
        name=obj.metadata.name,
        uid=obj.metadata.uid,
        resource_version="7",
        object=obj,
    )
    return codec.encode(event)


def test_the_service_decodes_volumes_as_facts() -> None:
    assert KIND_STRUCTS["volume"] is VolumeFacts


@settings(max_examples=200, deadline=None)
@given(
    state=texts,
    robustness=texts,
    owner=texts,
    image=texts,
    current=texts,
    generation=st.integers(0, 5),
    annotations=st.dictionaries(st.sampled_from([ROLLBACK_APPROVED, ROLLED_BACK, "other"]), texts),
    labels=st.dictionaries(st.sampled_from(["longhornvolume", "recurring-job"]), texts),
    standby=st.booleans(),
    expanding=st.booleans(),
    migrating=st.sampled_from(["", "node-2"]),
    locality=st.sampled_from(["disabled", "strict-local"]),
    engine=st.sampled_from(["v1", "v2"]),
)
def test_facts_fill_a_record_as_the_whole_volume_does(
    state: str,
    robustness: str,
    owner: str,
    image: str,
    current: str,
    generation: int,
    annotations: dict[str, str],
    labels: dict[str, str],
    standby: bool,
    expanding: bool,
    migrating: str,
    locality: str,
    engine: str,
) -> None:
    base = volume(
        "pvc-1",
        owner=owner,
        state=state,
        robustness=robustness,
        image=image,
        current=current,
        standby=standby,
        expansion_required=expanding,
        migration_node=migrating,
        locality=locality,
        data_engine=engine,
    )
    meta = msgspec.structs.replace(
        base.metadata,
        generation=generation,
        annotations=annotations,
        labels=labels,
        finalizers=("longhorn.io",),
        creation_timestamp="2026-11-29T18:46:00Z",
    )
    data = _published(msgspec.structs.replace(base, metadata=meta))
    whole = codec.decode(data, ObjectEvent[lh.Volume]).object
    facts = codec.decode(data, ObjectEvent[VolumeFacts]).object
    assert isinstance(facts, VolumeFacts)
    assert _record(facts) == _record(whole)
