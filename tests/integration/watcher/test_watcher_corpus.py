"""The corpus of real Longhorn objects, loaded into the sandbox emulator as they were published
(nulls, absent fields, empty strings and all), reaches LH_OBJECTS through the watcher: every
object an ADDED event with its object, nothing in LH_DEAD, nothing UNREADABLE. So does a copy of
each with every nullable field of its kind (nullable-fields.md) set to null, as Longhorn sends a
stopped Engine or an instance manager without instances.

The v1beta1 objects of the corpus are not loaded: the emulator serves Longhorn's CRDs at v1beta2
only, as Longhorn 1.10 does (tests/unit/model/test_corpus.py checks they are refused clearly).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client

from corral_bus import Bus
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.subjects import object_subject
from corral_sandbox.emulator import Emulator
from corral_watcher.watcher import Watcher
from tests.fixtures.corpus import CorpusObject, corpus_objects, nullable_paths, with_nulls
from tests.integration.watcher.support import (
    FAST_WATCH,
    NAMESPACE,
    dead_letters,
    last_per_subject,
    stream_history,
    until_no_problems,
)

pytestmark = pytest.mark.integration

READABLE = [o for o in corpus_objects() if o.readable]
PATHS = nullable_paths()


def nulled(obj: CorpusObject) -> CorpusObject:
    """`obj` renamed `<name>-nulled`, every nullable field of its kind null."""
    document = with_nulls(obj.document, PATHS.get(obj.kind, set()))
    document["metadata"]["name"] = f"{obj.name}-nulled"
    document["metadata"].pop("uid", None)
    return CorpusObject(path=obj.path, header=obj.header, document=document)


OBJECTS = READABLE + [nulled(o) for o in READABLE if PATHS.get(o.kind)]
SETTINGS = FAST_WATCH


def load(emulator: Emulator, objects: list[CorpusObject]) -> dict[tuple[str, str], dict[str, Any]]:
    """Load each object as published (status included); (kind token, name) → the emulator's copy.
    Two corpus files hold the same instance manager (a new install and an upgrade): the later one
    replaces the earlier, as an update would."""
    for obj in objects:
        emulator.load(obj.info.group, obj.info.plural, [obj.document])
    return {
        (o.info.token, o.name): emulator.get(o.info.group, o.info.plural, NAMESPACE, o.name) or {}
        for o in objects
    }


async def test_every_corpus_object_reaches_lh_objects(
    emulator: Emulator, kube_api: client.ApiClient, bus: Bus
) -> None:
    stored = load(emulator, OBJECTS)
    kinds = sorted({token for token, _ in stored})
    watcher = Watcher(kube_api, bus, kinds, SETTINGS, ack_timeout=1.0)
    await watcher.start()
    try:
        async with asyncio.timeout(30):
            await watcher.wait_synced()

        async def missing() -> list[str]:
            last = last_per_subject(await stream_history(bus, "lh.obj.>"))
            problems = []
            for (token, name), obj in stored.items():
                event = last.get(object_subject(token, NAMESPACE, name))
                rv = obj["metadata"]["resourceVersion"]
                if event is None or event.type is not EventType.ADDED or event.resource_version != rv:
                    problems.append(f"{token} {name}: {event and event.type} (emulator at {rv})")
            return problems

        await until_no_problems(missing, what="every corpus object on LH_OBJECTS")
        last = last_per_subject(await stream_history(bus, "lh.obj.>"))
        for (token, name), obj in stored.items():
            info = next(o.info for o in OBJECTS if (o.info.token, o.name) == (token, name))
            raw = msgspec.json.encode(last[object_subject(token, NAMESPACE, name)])
            event = msgspec.json.decode(raw, type=ObjectEvent[info.struct])  # type: ignore[name-defined]
            assert event.object is not None and event.object.metadata.uid == obj["metadata"]["uid"]
        engine = last[object_subject("engine", NAMESPACE, "vol1-e-998b62c7")].object
        assert engine is not None and len(engine["status"]["replicaModeMap"]) == 4
        stopped = last[object_subject("engine", NAMESPACE, "vol1-e-998b62c7-nulled")].object
        assert stopped is not None and "replicaModeMap" not in stopped["status"]  # empty: omitted
        nulled_stored = stored[("engine", "vol1-e-998b62c7-nulled")]
        assert nulled_stored["status"]["replicaModeMap"] is None  # as the emulator serves it
        assert await dead_letters(bus) == []
        for token in kinds:
            assert watcher.metrics.value("corral_watcher_undecodable_lines_total", kind=token) == 0
    finally:
        await watcher.stop()
