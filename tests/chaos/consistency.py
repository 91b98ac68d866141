"""The end-of-stack check: the bus matches the cluster. For every object of every kind the watcher
follows, the last event on LH_OBJECTS carries the resourceVersion the API server holds now, whatever
was killed, restarted, cut or compacted on the way."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import msgspec
from nats.js.api import ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError, ServiceUnavailableError

from corral_bus import Bus
from corral_model.envelopes import ObjectEvent
from corral_model.subjects import OBJECTS_STREAM, object_subject
from tests.chaos.waves import GROUP
from tests.fixtures.processes import eventually
from tests.fixtures.sandbox import Sandbox

PLURALS = {
    "volume": "volumes",
    "replica": "replicas",
    "engineimage": "engineimages",
    "node": "nodes",
    "setting": "settings",
}
_event = msgspec.json.Decoder(ObjectEvent[Any])


async def mismatches(bus: Bus, sandbox: Sandbox) -> list[str]:
    """What differs between LH_OBJECTS and the emulator ([] when the bus matches the cluster)."""
    found: list[str] = []
    for token, plural in PLURALS.items():
        for obj in sandbox.emulator.list(GROUP, plural, sandbox.namespace):
            meta = obj["metadata"]
            subject = object_subject(token, meta.get("namespace", ""), meta["name"])
            try:
                stored = await bus.js.get_last_msg(OBJECTS_STREAM, subject)
            except NotFoundError:
                found.append(f"{token}/{meta['name']}: not on the bus")
                continue
            event = _event.decode(stored.data or b"")
            if event.resource_version != meta["resourceVersion"]:
                found.append(
                    f"{token}/{meta['name']}: bus {event.resource_version}, cluster {meta['resourceVersion']}"
                )
    return found


async def wait_bus_matches_cluster(bus: Bus, sandbox: Sandbox, within: float = 30.0) -> None:
    """Until LH_OBJECTS matches the emulator (the watcher may still be catching up); fails naming
    every object that still differs."""
    last: list[str] = []

    async def matches() -> bool:
        last[:] = await mismatches(bus, sandbox)
        return not last

    try:
        await eventually(matches, within=within, what="the bus to match the cluster", interval=0.1)
    except AssertionError:
        raise AssertionError(f"the bus does not match the cluster after {within}s: {last}") from None


async def history(bus: Bus, subject: str, within: float = 30.0) -> list[str]:
    """The resourceVersions LH_OBJECTS holds for one object's subject, oldest stored first. Read
    again while the cluster still answers 503 (a stream leader being elected after the faults)."""
    give_up = asyncio.get_running_loop().time() + within
    while True:
        try:
            return await _history(bus, subject)
        except ServiceUnavailableError:
            if asyncio.get_running_loop().time() > give_up:
                raise
            await asyncio.sleep(0.5)


async def _history(bus: Bus, subject: str) -> list[str]:
    info = await bus.js.stream_info(OBJECTS_STREAM, subjects_filter=subject)
    count = int((info.state.subjects or {}).get(subject, 0))
    if not count:
        return []
    psub = await bus.js.pull_subscribe(
        subject,
        stream=OBJECTS_STREAM,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, inactive_threshold=5.0),
    )
    versions: list[str] = []
    try:
        while len(versions) < count:
            for msg in await psub.fetch(count - len(versions), timeout=5):
                versions.append(_event.decode(msg.data).resource_version)
                await msg.ack()
    finally:
        with contextlib.suppress(Exception):
            await psub.unsubscribe()
    return versions


async def overtaken(bus: Bus, sandbox: Sandbox) -> tuple[list[str], list[str]]:
    """The objects whose current state is on LH_OBJECTS but an older event of theirs was stored after
    it (a stale message overtook the newest), and those whose current state is not there at all."""
    stale: list[str] = []
    missing: list[str] = []
    for token, plural in PLURALS.items():
        for obj in sandbox.emulator.list(GROUP, plural, sandbox.namespace):
            meta = obj["metadata"]
            subject = object_subject(token, meta.get("namespace", ""), meta["name"])
            versions = await history(bus, subject)
            if versions and versions[-1] == meta["resourceVersion"]:
                continue
            described = f"{token}/{meta['name']}: cluster {meta['resourceVersion']}, bus history {versions}"
            (stale if meta["resourceVersion"] in versions else missing).append(described)
    return stale, missing
