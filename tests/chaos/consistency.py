"""The end-of-stack check: the bus matches the cluster. For every object of every kind the watcher
follows, the last event on LH_OBJECTS carries the resourceVersion the API server holds now, whatever
was killed, restarted, cut or compacted on the way."""

from __future__ import annotations

from typing import Any

import msgspec
from nats.js.errors import NotFoundError

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
