"""How many LH_OBJECTS events one engine upgrade produces, measured on a real wave in the sandbox.

bench_engine_upgrade.py times the decider per event, so its figure depends on the mix of events it
feeds: how many events of each kind the service sees per upgrade it starts. This script measures
that mix instead of guessing it. It runs the demo cluster (`corral sandbox up --demo`: 32 volumes on
an old engine image, limit 2 per owner node, a few held back on purpose) with the real path:
sandbox (Longhorn's controllers simulated) → watcher → LH_OBJECTS → engine-upgrade → LH_COMMANDS →
actuator → the emulator; brings a new default engine image as a Longhorn upgrade does
(corral_cli.demo.engine_wave), waits for the whole wave to end, then reads back every message on
the subjects the engine-upgrade service subscribes to (`DecisionService.object_filters`) and on LH_COMMANDS
and LH_RESULTS.

Each object event after the new default image is classified against the previous version of the
same object (volume spec.image / status.currentImage / other; replica created / deleted /
spec.image / other; engineimage; node; setting) and attributed to an upgrade when it is about a
volume the service commanded (replicas by spec.volumeName), else to background. Reported
(bench/results/wave_events.json): events per command by kind and class, the most common ordered
sequence of one upgrade's events, and the background events per command.

Run: `cd /work/main && .venv/bin/python -m bench.measure_wave_events`. Measures only.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from typing import Any

import msgspec

from bench.report import write_report
from corral_bus import connect, ensure_streams
from corral_cli.demo.engine_wave import bring_engine_image
from corral_cli.demo.show import DEMO_IMAGE
from corral_engine_upgrade.service import DEFINITION
from corral_engine_upgrade.view import KIND_STRUCTS
from corral_kube.client import api_client
from corral_model.envelopes import EventType, ObjectEvent
from corral_model.subjects import OBJECTS_STREAM, RESULTS_STREAM, command_stream, unescape_token
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import demo_seed
from tests.fixtures.nats import BinaryNats
from tests.fixtures.sandbox import fast_config
from tests.scenarios.engine_upgrade.conftest import actuator, engine_upgrade, watcher

GROUP, VERSION = "longhorn.io", "v1beta2"
QUIET_S = 5.0  # the wave is over when no volume is in progress and none moved for this long
WAVE_TIMEOUT_S = 240.0
_DECODE = {kind: msgspec.json.Decoder(ObjectEvent[struct]) for kind, struct in KIND_STRUCTS.items()}  # type: ignore[valid-type]


async def wait_wave_over(kubeconfig: str, namespace: str, image: str) -> int:
    """Poll the emulator until no volume is upgrading and the set on `image` held still QUIET_S."""
    from kubernetes_asyncio import client

    api = await api_client(kubeconfig)
    try:
        objects = client.CustomObjectsApi(api)
        deadline = time.monotonic() + WAVE_TIMEOUT_S
        last: frozenset[str] = frozenset()
        still_since = time.monotonic()
        while time.monotonic() < deadline:
            listing = await objects.list_namespaced_custom_object(GROUP, VERSION, namespace, "volumes")
            volumes = listing["items"]
            moving = any(
                v["spec"].get("image") != (v.get("status") or {}).get("currentImage") for v in volumes
            )
            done = frozenset(v["metadata"]["name"] for v in volumes if v["spec"].get("image") == image)
            if moving or done != last:
                last, still_since = done, time.monotonic()
            elif time.monotonic() - still_since >= QUIET_S:
                return len(done)
            await asyncio.sleep(0.2)
        raise TimeoutError(f"the wave did not end in {WAVE_TIMEOUT_S:.0f}s ({len(last)} volumes on {image})")
    finally:
        await api.close()


def classify(kind: str, event: ObjectEvent[Any], previous: Any) -> str:
    """What changed, against the previous version of the same object on the stream."""
    obj = event.object
    assert obj is not None  # RESYNCED markers are skipped before
    if kind == "volume":
        if previous is None:
            return "volume other"
        if obj.spec.image != previous.spec.image:
            return "volume spec.image"
        if obj.status.current_image != previous.status.current_image:
            return "volume currentImage"
        return "volume other"
    if kind == "replica":
        if event.type == EventType.DELETED:
            return "replica deleted"
        if previous is None or event.type == EventType.ADDED:
            return "replica created"
        if obj.spec.image != previous.spec.image:
            return "replica spec.image"
        return "replica other"
    return kind


def volume_of(kind: str, event: ObjectEvent[Any]) -> str:
    if kind == "volume":
        return event.name
    if kind == "replica" and event.object is not None:
        return str(event.object.spec.volume_name)
    return ""


async def read_stream(js: Any, stream: str) -> list[Any]:
    info = await js.stream_info(stream)
    messages = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        try:
            messages.append(await js.get_msg(stream, seq))
        except Exception:  # a sequence deleted by limits is simply absent
            continue
    return messages


async def measure() -> dict[str, Any]:
    seed = demo_seed()
    config = dataclasses.replace(fast_config(), images=dict(seed.image_profiles))
    nats = BinaryNats()
    nats.start()
    try:
        bus = await connect(nats.url, name="measure")
        await ensure_streams(bus.js)
        async with SandboxCluster(seed, sim_config=config) as cluster:
            kubeconfig = str(cluster.kubeconfig_path)
            stack = [watcher(kubeconfig, nats.url), actuator(kubeconfig, nats.url), engine_upgrade(nats.url)]
            try:
                deadline = time.monotonic() + 120
                while not all(s.ready for s in stack):
                    if time.monotonic() > deadline:
                        raise TimeoutError("services not ready in 120 s")
                    await asyncio.sleep(0.05)
                await bring_engine_image(kubeconfig, seed.namespace, DEMO_IMAGE, on_step=print)
                upgraded = await wait_wave_over(kubeconfig, seed.namespace, DEMO_IMAGE)
                await asyncio.sleep(1.0)  # the watcher's last events reach the stream
                objects = await read_stream(bus.js, OBJECTS_STREAM)
                # The command stream is a work queue (acked commands leave it): its last sequence is the
                # number published; which volumes they were about is read from LH_RESULTS.
                published = (await bus.js.stream_info(command_stream("engine-upgrade"))).state.last_seq
                results = await read_stream(bus.js, RESULTS_STREAM)
            finally:
                for service in reversed(stack):
                    await service.stop()
        await bus.close()
    finally:
        nats.stop()
    return tally(seed.namespace, objects, published, results, upgraded)


def tally(
    namespace: str, objects: list[Any], published: int, results: list[Any], upgraded: int
) -> dict[str, Any]:
    subscribed = [f.removesuffix(".>") + "." for f in DEFINITION.object_filters(namespace)]
    commanded: collections.Counter[str] = collections.Counter()
    for message in results:
        _, _, service, kind, _, name = message.subject.split(".")
        if service == "engine-upgrade" and kind == "volume":
            commanded[unescape_token(name)] += 1
    outcomes = collections.Counter(msgspec.json.decode(m.data).get("outcome", "") for m in results)
    previous: dict[tuple[str, str], Any] = {}
    per_upgrade: collections.Counter[str] = collections.Counter()
    background: collections.Counter[str] = collections.Counter()
    sequences: dict[str, list[str]] = collections.defaultdict(list)
    started = False  # counting starts at the default-engine-image setting event (the wave's start)
    for message in objects:
        if not any(message.subject.startswith(prefix) for prefix in subscribed):
            continue
        kind = message.subject.split(".", 3)[2]
        event = _DECODE[kind].decode(message.data)
        if event.type == EventType.RESYNCED or event.object is None:
            continue
        key = (kind, event.name)
        if kind == "setting" and event.name == "default-engine-image" and event.object.value == DEMO_IMAGE:
            started = True
        if started:
            label = classify(kind, event, previous.get(key))
            volume = volume_of(kind, event)
            if volume in commanded:
                per_upgrade[label] += 1
                sequences[volume].append(label)
            else:
                background[label] += 1
        previous[key] = None if event.type == EventType.DELETED else event.object
    n = sum(commanded.values()) or 1
    shapes = collections.Counter(" → ".join(seq) for seq in sequences.values())
    live = [s for s in sequences.values() if "replica created" in s]
    offline = [s for s in sequences.values() if "replica created" not in s]
    return {
        "commands_published": published,
        "commands_with_result": sum(commanded.values()),
        "volumes_commanded": len(commanded),
        "volumes_on_new_image": upgraded,
        "results_by_outcome": dict(outcomes),
        "upgrades_live": len(live),
        "upgrades_offline": len(offline),
        "events_per_upgrade": {k: round(v / n, 2) for k, v in sorted(per_upgrade.items())},
        "events_per_upgrade_total": round(sum(per_upgrade.values()) / n, 2),
        "events_per_live_upgrade": round(sum(map(len, live)) / max(1, len(live)), 2),
        "events_per_offline_upgrade": round(sum(map(len, offline)) / max(1, len(offline)), 2),
        "background_per_upgrade": {k: round(v / n, 2) for k, v in sorted(background.items())},
        "background_per_upgrade_total": round(sum(background.values()) / n, 2),
        "slot_freeing_per_upgrade": round(per_upgrade["volume currentImage"] / n, 2),
        "common_sequences": [{"count": c, "events": s} for s, c in shapes.most_common(4)],
    }


def main() -> None:
    write_report("wave_events", asyncio.run(measure()))


if __name__ == "__main__":
    main()
