"""The watcher cannot be poisoned from the bus: the API server is the truth, LH_OBJECTS a copy.

A security probe holding the watcher's NATS credentials published an event with a huge
resourceVersion for a real volume. The real watcher then judged each of its own later events of that
volume "superseded" by the forged one and dropped it, so the forgery stayed the volume's last
message for good. Here the same forgery goes onto the locked-down bus, as the watcher user, and the
real watcher (against the sandbox's API emulator) must replace it with the API server's object,
report it, and keep publishing the volume's later changes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio import client
from nats.js.errors import APIError

from corral_bus import MSG_ID_HEADER, Bus
from corral_bus.streams import ROLLUP_HEADER
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.subjects import OBJECTS_STREAM, object_subject
from corral_sandbox.emulator import Emulator
from corral_watcher.watcher import Watcher
from tests.fixtures.nats import NatsServer
from tests.fixtures.processes import eventually
from tests.fixtures.secure_nats import connect_as
from tests.integration.watcher.support import (
    FAST_WATCH,
    GROUP,
    NAMESPACE,
    Volumes,
    mismatches,
    stream_history,
    until_no_problems,
)

pytestmark = pytest.mark.integration

FORGED_RV = "999999999999"
NEW_IMAGE = "longhornio/longhorn-engine:v1.8.0"
NEWER_IMAGE = "longhornio/longhorn-engine:v1.9.0"


@pytest.fixture
async def watcher_bus(secure_nats: NatsServer, secure_bus: Bus) -> AsyncIterator[Bus]:
    """The watcher user's connection, once the setup step made the streams (`secure_bus`)."""
    bus = await connect_as(secure_nats, "watcher")
    try:
        yield bus
    finally:
        await bus.close()


async def _forge(bus: Bus, emulator: Emulator, name: str) -> None:
    """What the probe published: the volume as it is, claiming a resourceVersion far ahead, and a
    standby DR volume on top (a state the API server never had)."""
    real = next(o for o in emulator.list(GROUP, "volumes", NAMESPACE) if o["metadata"]["name"] == name)
    obj: dict[str, Any] = {**real, "metadata": {**real["metadata"], "resourceVersion": FORGED_RV}}
    obj["spec"] = {**obj["spec"], "standby": True}
    event: ObjectEvent[Any] = ObjectEvent(
        type=EventType.MODIFIED,
        kind="volume",
        namespace=NAMESPACE,
        name=name,
        uid=real["metadata"]["uid"],
        resource_version=FORGED_RV,
        observed_at=time.time(),
        object=obj,
    )
    msg_id = f"volume:{real['metadata']['uid']}:{FORGED_RV}"
    await bus.js.publish(
        object_subject("volume", NAMESPACE, name), msgspec.json.encode(event), headers={MSG_ID_HEADER: msg_id}
    )


async def _last(bus: Bus, name: str) -> ObjectEvent[Any]:
    raw = await bus.js.get_last_msg(OBJECTS_STREAM, object_subject("volume", NAMESPACE, name))
    return msgspec.json.decode(raw.data or b"", type=ObjectEvent[Any])


async def test_a_forged_newer_event_is_replaced_by_the_api_servers_object(
    emulator: Emulator, kube_api: client.ApiClient, watcher_bus: Bus, secure_bus: Bus
) -> None:
    """The publisher's side: the object's next write meets the forgery (the guard, below, is off)."""
    admin = secure_bus  # reads the stream back; the forgery and the watcher use the watcher user
    watcher = Watcher(kube_api, watcher_bus, ["volume"], FAST_WATCH, ack_timeout=1.0, guard=False)
    await watcher.start()
    try:
        async with asyncio.timeout(20):
            await watcher.wait_synced()
        volumes = Volumes(kube_api)
        await volumes.create("vol-dr")
        await volumes.create("vol-other")

        async def converged() -> list[str]:
            return mismatches(emulator, await stream_history(admin))

        await until_no_problems(converged, within=20, what="both volumes on the bus")
        await _forge(watcher_bus, emulator, "vol-dr")
        assert (await _last(admin, "vol-dr")).resource_version == FORGED_RV

        # The volume's next real change collides with the forgery: the API server's object wins.
        await volumes.set_image("vol-dr", NEW_IMAGE)
        await until_no_problems(converged, within=20, what="the forgery replaced by the API's object")
        last = await _last(admin, "vol-dr")
        assert last.resource_version != FORGED_RV
        assert not (last.object or {})["spec"].get("standby")
        contradicted = "corral_watcher_contradicted_events_total"
        assert watcher.metrics.value(contradicted, kind="volume") == 1
        assert watcher.publisher.superseded == 0

        # And later real changes keep flowing, with no forged state in between.
        await volumes.set_image("vol-dr", NEWER_IMAGE)
        await volumes.set_image("vol-other", NEWER_IMAGE)
        await until_no_problems(converged, within=20, what="later changes published")

        async def newest_image() -> bool:
            return (await _last(admin, "vol-dr")).object["spec"]["image"] == NEWER_IMAGE  # type: ignore[no-any-return,index]

        await eventually(newest_image, within=10, what="the newest image on the bus")
    finally:
        await watcher.stop()


async def test_a_forged_state_of_an_object_that_does_not_change_is_replaced(
    emulator: Emulator, kube_api: client.ApiClient, watcher_bus: Bus, secure_bus: Bus
) -> None:
    """The guard's side: no later change of the object is needed to replace the forgery."""
    watcher = Watcher(kube_api, watcher_bus, ["volume"], FAST_WATCH, ack_timeout=1.0)
    await watcher.start()
    try:
        async with asyncio.timeout(20):
            await watcher.wait_synced()
        volumes = Volumes(kube_api)
        await volumes.create("vol-dr")
        await volumes.create("vol-other")

        async def converged() -> list[str]:
            return mismatches(emulator, await stream_history(secure_bus))

        await until_no_problems(converged, within=20, what="both volumes on the bus")
        await _forge(watcher_bus, emulator, "vol-dr")
        await until_no_problems(converged, within=20, what="the forgery replaced by the API's object")
        last = await _last(secure_bus, "vol-dr")
        assert not (last.object or {})["spec"].get("standby")
        assert watcher.metrics.value("corral_watcher_contradicted_events_total", kind="volume") == 1
        assert watcher.guard is not None and watcher.guard.restored == 1

        await volumes.set_image("vol-dr", NEW_IMAGE)
        await until_no_problems(converged, within=20, what="a later change published")
    finally:
        await watcher.stop()


@pytest.mark.parametrize("rollup", ["all", "sub"])
async def test_a_rollup_is_refused_and_lh_objects_keeps_its_messages(
    emulator: Emulator, kube_api: client.ApiClient, watcher_bus: Bus, secure_bus: Bus, rollup: str
) -> None:
    """The probe emptied LH_OBJECTS (1 584 messages to 1) with one `Nats-Rollup: all` message."""
    watcher = Watcher(kube_api, watcher_bus, ["volume"], FAST_WATCH, ack_timeout=1.0)
    await watcher.start()
    try:
        async with asyncio.timeout(20):
            await watcher.wait_synced()
        volumes = Volumes(kube_api)
        for i in range(5):
            await volumes.create(f"vol-{i}")
        await volumes.set_image("vol-0", NEW_IMAGE)

        async def converged() -> list[str]:
            return mismatches(emulator, await stream_history(secure_bus))

        await until_no_problems(converged, within=20, what="the volumes on the bus")
    finally:
        await watcher.stop()
    before = (await secure_bus.js.stream_info(OBJECTS_STREAM)).state.messages

    subject = object_subject("volume", NAMESPACE, "vol-0")
    with pytest.raises(APIError) as refused:
        await watcher_bus.js.publish(subject, b"{}", headers={ROLLUP_HEADER: rollup, MSG_ID_HEADER: "probe"})
    assert "rollup not permitted" in str(refused.value.description)
    assert (await secure_bus.js.stream_info(OBJECTS_STREAM)).state.messages == before
    assert mismatches(emulator, await stream_history(secure_bus)) == []
