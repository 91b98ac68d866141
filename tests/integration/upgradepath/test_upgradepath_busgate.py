"""The start-up gate over a real NATS server: view from LH_OBJECTS, Event commands into LH_COMMANDS.

The test plays the watcher (publishing ObjectEvents and RESYNCED markers exactly as subjects.py lays
them out) and reads LH_COMMANDS back as the actuator would.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from corral_bus import Bus
from corral_model import subjects
from corral_model.codec import decode, encode
from corral_model.envelopes import Command, EventType, ObjectEvent, Verb
from corral_model.longhorn import EngineImage, EngineImageStatus, ObjectMeta, Setting
from corral_upgradepath.busgate import GateUndecidable, enforce_startup_gate
from tests.fixtures.processes import eventually

NS = "longhorn-system"
NOW = 1_790_000_000.0


async def publish(bus: Bus, event: ObjectEvent[Any]) -> None:
    if event.type is EventType.RESYNCED:
        subject = subjects.resync_subject(event.kind, event.namespace)
    else:
        subject = subjects.object_subject(event.kind, event.namespace, event.name)
    await bus.js.publish(subject, encode(event), stream=subjects.OBJECTS_STREAM)


def added(kind: str, obj: Setting | EngineImage) -> ObjectEvent[Any]:
    meta = obj.metadata
    return ObjectEvent(
        type=EventType.ADDED,
        kind=kind,
        namespace=NS,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.resource_version,
        object=obj,
    )


def resynced(kind: str, resource_version: str) -> ObjectEvent[Any]:
    return ObjectEvent(
        type=EventType.RESYNCED, kind=kind, namespace=NS, name="", resource_version=resource_version
    )


async def watcher_lists(bus: Bus, version: str | None, *images: EngineImage) -> None:
    """What the watcher publishes after listing settings and engine images once."""
    if version is not None:
        meta = ObjectMeta(name="current-longhorn-version", namespace=NS, uid="uid-v", resource_version="7")
        await publish(bus, added("setting", Setting(metadata=meta, value=version)))
    other = ObjectMeta(name="default-engine-image", namespace=NS)
    await publish(bus, added("setting", Setting(metadata=other, value="img:v1")))
    await publish(bus, resynced("setting", "8"))
    for ei in images:
        await publish(bus, added("engineimage", ei))
    await publish(bus, resynced("engineimage", "9"))


def engine_image(name: str, cli: int, ref_count: int = 1) -> EngineImage:
    return EngineImage(
        metadata=ObjectMeta(name=name, namespace=NS),
        status=EngineImageStatus(ref_count=ref_count, cli_api_version=cli, controller_api_version=5),
    )


async def commands(bus: Bus) -> list[tuple[str, Command]]:
    stream = subjects.command_stream(subjects.GATE_SERVICE)
    info = await bus.js.stream_info(stream)
    out: list[tuple[str, Command]] = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        if info.state.messages == 0:
            break
        msg = await bus.js.get_msg(stream, seq)
        assert msg.data is not None and msg.subject is not None
        out.append((msg.subject, decode(msg.data, Command)))
    return out


async def test_blocked_path_asks_for_a_warning_event_once(bus: Bus) -> None:
    await watcher_lists(bus, "v1.9.3", engine_image("ei-a", 10))
    decision = await enforce_startup_gate(
        bus, service="engine-upgrade", namespace=NS, distro="", clock=lambda: NOW, wait_s=20
    )
    assert decision.blocked
    assert decision.reason == (
        "failed to upgrade since upgrading from v1.9.3 to v1.11.0 for minor version is not supported"
    )
    (subject, command), *rest = await commands(bus)
    assert rest == []
    # Under the gate's own, unfenced service name; the Event's source says which service decided.
    assert subject == f"lh.cmd.upgrade-gate.event.longhorn-system.{command.target.name.replace('.', '%2E')}"
    assert command.body is not None and command.body["source"] == {"component": "corral-engine-upgrade"}
    assert command.verb is Verb.CREATE and command.target.kind == "Event"
    assert command.body is not None
    assert (command.body["type"], command.body["reason"]) == ("Warning", "FailedUpgradePreCheck")
    assert command.body["message"] == decision.reason
    assert command.body["involvedObject"]["uid"] == "uid-v"

    # A crash-looping service decides again and republishes: JetStream drops the duplicate.
    again = await enforce_startup_gate(bus, service="engine-upgrade", namespace=NS, distro="", wait_s=20)
    assert again == decision
    assert len(await commands(bus)) == 1


async def test_allowed_path_asks_for_a_normal_event(bus: Bus) -> None:
    await watcher_lists(bus, "v1.10.2", engine_image("ei-a", 10), engine_image("ei-old", 3, ref_count=0))
    decision = await enforce_startup_gate(bus, service="im-restart", namespace=NS, distro="", wait_s=20)
    assert decision.allowed
    [(_, command)] = await commands(bus)
    assert command.body is not None
    assert (command.body["type"], command.body["reason"], command.body["message"]) == (
        "Normal",
        "PassedUpgradeCheck",
        "pre-upgrade check passed",
    )


async def test_engine_image_in_use_blocks(bus: Bus) -> None:
    await watcher_lists(bus, "v1.10.2", engine_image("ei-a", 10), engine_image("ei-v14", 7, ref_count=3))
    decision = await enforce_startup_gate(bus, service="watcher", namespace=NS, distro="", wait_s=20)
    assert decision.reason == (
        "failed checking Engine upgrade path: incompatible Engine ei-v14 client API version: "
        "found version 7 is below required minimal version 8"
    )


async def test_gate_waits_for_the_watcher(bus: Bus) -> None:
    """Started before the watcher has listed anything, the gate waits instead of assuming a fresh install."""
    gate = asyncio.create_task(
        enforce_startup_gate(bus, service="watcher", namespace=NS, distro="", wait_s=20)
    )
    await publish(bus, resynced("engineimage", "1"))
    # Once the gate's reader exists, it has bootstrapped from a view without any setting...

    async def reading() -> bool:
        return (await bus.js.stream_info(subjects.OBJECTS_STREAM)).state.consumer_count > 0

    await eventually(reading, within=20, what="the gate to start reading LH_OBJECTS")
    # ...which would read as a fresh install (allowed) if it decided now. It must wait for this:
    await watcher_lists(bus, "v1.8.0")
    decision = await asyncio.wait_for(gate, 20)
    assert decision.blocked  # v1.8.0 -> v1.11.0: three minors


async def test_no_watcher_means_undecidable(bus: Bus) -> None:
    await publish(bus, resynced("setting", "1"))
    with pytest.raises(GateUndecidable, match=r"no complete view .* within 1s \(is the watcher running\?\)"):
        await enforce_startup_gate(bus, service="watcher", namespace=NS, distro="", wait_s=1)
    assert await commands(bus) == []


async def test_unreadable_version_setting_is_undecidable(bus: Bus) -> None:
    await bus.js.publish(
        subjects.object_subject("setting", NS, "current-longhorn-version"),
        b'{"schema": "corral.event/v1", "type": "ADDED", "kind": "setting", "namespace": "longhorn-system", '
        b'"name": "current-longhorn-version", "object": {"metadata": {"name": "x"}, "value": 11}}',
        stream=subjects.OBJECTS_STREAM,
    )
    with pytest.raises(GateUndecidable, match=r"unreadable message on lh\.obj\.setting\.longhorn-system"):
        await enforce_startup_gate(bus, service="watcher", namespace=NS, distro="", wait_s=20)
    assert await commands(bus) == []
