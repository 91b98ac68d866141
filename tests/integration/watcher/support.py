"""What the watcher's integration tests share: creating objects through the API, reading LH_OBJECTS
back, and the two oracles (the stream's last message per object equals the emulator's state; no
object's history goes backwards)."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from kubernetes_asyncio import client
from nats.js.api import DeliverPolicy

from corral_bus import Bus
from corral_model import codec
from corral_model.envelopes import DeadLetter, EventType, ObjectEvent
from corral_model.subjects import DEAD_PREFIX, DEAD_STREAM, OBJECTS_STREAM, object_subject
from corral_sandbox.emulator import Emulator
from corral_watcher.kindwatch import WatchSettings

NAMESPACE = "longhorn-system"
# The emulator bookmarks every 0.2 s: a second of silence is a dead watch; reconnect at once.
FAST_WATCH = WatchSettings(namespace=NAMESPACE, inactivity_timeout=1.0, backoff_initial=0.02, backoff_max=0.5)
GROUP = "longhorn.io"
VERSION = "v1beta2"

_event = msgspec.json.Decoder(ObjectEvent[Any])


class Stored(msgspec.Struct, frozen=True):
    seq: int
    subject: str
    msg_id: str
    event: ObjectEvent[Any]
    headers: dict[str, str] = {}


def volume_body(name: str, image: str = "longhornio/longhorn-engine:v1.7.0") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Volume",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
        "spec": {"image": image, "numberOfReplicas": 3, "size": "1073741824"},
    }


class Volumes:
    """Volumes created, changed and deleted through kubernetes-asyncio, as a user would."""

    def __init__(self, api: client.ApiClient) -> None:
        self.crd = client.CustomObjectsApi(api)

    async def create(self, name: str) -> None:
        await self.crd.create_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "volumes", volume_body(name)
        )

    async def set_image(self, name: str, image: str) -> None:
        await self.crd.patch_namespaced_custom_object(  # type: ignore[call-arg]
            GROUP,
            VERSION,
            NAMESPACE,
            "volumes",
            name,
            {"spec": {"image": image}},
            _content_type="application/merge-patch+json",
        )

    async def delete(self, name: str) -> None:
        await self.crd.delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, "volumes", name)


async def stream_history(bus: Bus, subjects: str = "lh.obj.>") -> list[Stored]:
    """Every message LH_OBJECTS holds on `subjects`, in stream order."""
    info = await bus.js.stream_info(OBJECTS_STREAM)
    if info.state.messages == 0:
        return []
    sub = await bus.js.subscribe(subjects, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    out: list[Stored] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=2.0)
            except TimeoutError:
                break
            headers = msg.headers or {}
            out.append(
                Stored(
                    seq=msg.metadata.sequence.stream,
                    subject=msg.subject,
                    msg_id=headers.get("Nats-Msg-Id", ""),
                    event=_event.decode(msg.data),
                    headers=dict(headers),
                )
            )
            if msg.metadata.num_pending == 0:
                break
    finally:
        await sub.unsubscribe()
    return out


async def dead_letters(bus: Bus) -> list[DeadLetter]:
    """Every dead letter LH_DEAD holds, in stream order."""
    info = await bus.js.stream_info(DEAD_STREAM)
    if info.state.messages == 0:
        return []
    sub = await bus.js.subscribe(f"{DEAD_PREFIX}.>", ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    out: list[DeadLetter] = []
    try:
        while True:
            msg = await sub.next_msg(timeout=2.0)
            out.append(codec.decode(msg.data, DeadLetter))
            if msg.metadata.num_pending == 0:
                return out
    finally:
        await sub.unsubscribe()


def last_per_subject(history: list[Stored]) -> dict[str, ObjectEvent[Any]]:
    last: dict[str, ObjectEvent[Any]] = {}
    for stored in history:
        last[stored.subject] = stored.event
    return last


def mismatches(
    emulator: Emulator, history: list[Stored], kind: str = "volume", plural: str = "volumes"
) -> list[str]:
    """How the stream's last message per object differs from the emulator's current state."""
    problems: list[str] = []
    last = last_per_subject(history)
    truth = {obj["metadata"]["name"]: obj for obj in emulator.list(GROUP, plural, NAMESPACE)}
    for name, obj in truth.items():
        event = last.get(object_subject(kind, NAMESPACE, name))
        rv = obj["metadata"]["resourceVersion"]
        if event is None:
            problems.append(f"{name}: never published (emulator at {rv})")
        elif event.type is EventType.UNREADABLE:
            problems.append(f"{name}: last message UNREADABLE at {event.resource_version}, emulator at {rv}")
        elif event.type is EventType.DELETED or event.resource_version != rv:
            problems.append(
                f"{name}: last message {event.type} at {event.resource_version}, emulator at {rv}"
            )
        elif (image := (event.object or {})["spec"]["image"]) != obj["spec"]["image"]:
            problems.append(f"{name}: image {image} != {obj['spec']['image']}")
    prefix = f"lh.obj.{kind}.{NAMESPACE}."
    for subject, event in last.items():
        if not subject.startswith(prefix) or subject.endswith("._resync"):
            continue
        if event.name not in truth and event.type is not EventType.DELETED:
            problems.append(f"{event.name}: gone from the emulator, but last message is {event.type}")
    return problems


def tombstone_copy(stored: Stored) -> bool:
    """One of the copies that follow a tombstone to fill its subject (corral_watcher.tombstones)."""
    return stored.event.type is EventType.DELETED and stored.msg_id.rsplit(".", 1)[-1].isdigit()


def backwards(history: list[Stored]) -> list[str]:
    """Objects whose stored events do not strictly increase in resourceVersion."""
    problems: list[str] = []
    newest: dict[str, int] = {}
    for stored in history:
        if stored.event.type is EventType.RESYNCED or tombstone_copy(stored):
            continue
        rv = int(stored.event.resource_version)
        before = newest.get(stored.subject)
        if before is not None and rv <= before:
            problems.append(f"{stored.subject}: seq {stored.seq} at {rv} after {before}")
        newest[stored.subject] = rv
    return problems


def duplicates(history: list[Stored]) -> list[str]:
    """Messages stored more than once for the same object version."""
    counts: dict[tuple[str, str, EventType], int] = defaultdict(int)
    for stored in history:
        if not tombstone_copy(stored):
            counts[(stored.subject, stored.event.resource_version, stored.event.type)] += 1
    return [f"{s} {t} at {rv}: stored {n} times" for (s, rv, t), n in counts.items() if n > 1]


async def until_no_problems(
    check: Callable[[], Awaitable[list[str]]], *, within: float = 30.0, what: str = "condition"
) -> None:
    """Wait until `check` reports no problems, polling; fail with the last problems at the deadline."""
    deadline = time.monotonic() + within
    problems: list[str] = []
    while time.monotonic() < deadline:
        problems = await check()
        if not problems:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} not reached within {within}s: {problems[:10]}")
