"""What the bus's history (LH_HISTORY) costs: bytes per message, per volume per wave, per volume per day.

An operator sizes LH_HISTORY (`corral bus init --history-max-age/--history-max-bytes`, the chart's
`nats.history`) as bytes per message * messages per day * days kept. This measures the first on a
real wave: the demo cluster (`corral sandbox up --demo`, resized with `--volumes`/`--nodes`), the
real path (sandbox → watcher → LH_OBJECTS → engine-upgrade → LH_COMMANDS → actuator → LH_RESULTS,
everything copied into LH_HISTORY by JetStream), a new default engine image as a Longhorn upgrade
brings, until the wave is over. Then it reads the history back and reports what JetStream accounts
for it (`state.bytes`, what `max_bytes` limits: payload, headers and subject of each message):

* bytes per message, by origin (object events, commands, results), and messages per volume per wave;
* the idle cluster's own event rate, measured over `--idle-s` after the wave (the sandbox's
  controllers are quiet when nothing changes; a real Longhorn updates volume, engine and replica
  status more often), and so a stated steady rate, `STATED_EVENTS_PER_VOLUME_PER_HOUR` object
  events per volume per hour, is used for the per-day figure;
* bytes per volume per day = stated rate * 24 h * bytes per object event + one wave a day;
  per volume per week (the default retention), and how many volumes the default 1 GiB holds a week.

`--quick` (what `make test` runs, tests/integration/bench/test_history_bench.py): a 2-node,
6-volume cluster and a short idle spell; same report, fewer volumes. Measures only; never asserts.

Run: `.venv/bin/python -m bench.bench_history [--quick] [--volumes N --nodes N] [--idle-s S]`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
from collections import Counter
from typing import Any

from bench.measure_wave_events import wait_wave_over
from bench.report import quick, write_report
from corral_bus import connect
from corral_bus.history import DEFAULT_MAX_AGE_S, DEFAULT_MAX_BYTES
from corral_bus.setup import prepare_bus
from corral_cli.demo.engine_wave import bring_engine_image
from corral_cli.demo.show import DEMO_IMAGE
from corral_model.subjects import HISTORY_PREFIX, HISTORY_STREAM
from corral_sandbox.cluster import SandboxCluster
from corral_sandbox.seeds import demo_seed
from corral_sandbox.seeds.cluster_objects import all_volumes, resized
from tests.fixtures.nats import BinaryNats
from tests.fixtures.sandbox import fast_config
from tests.scenarios.engine_upgrade.conftest import actuator, engine_upgrade, watcher

STATED_EVENTS_PER_VOLUME_PER_HOUR = 12.0
"""The steady rate the per-day figure states: one status change every 20 minutes for each of a
volume's four objects (the volume, its engine, two replicas), beyond any wave."""
WAVES_PER_DAY = 1.0
READY_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True)
class Options:
    volumes: int | None = None
    nodes: int | None = None
    idle_s: float = 20.0


QUICK = Options(volumes=6, nodes=2, idle_s=3.0)


def origin(subject: str) -> str:
    if subject.startswith(HISTORY_PREFIX + "."):
        subject = subject.removeprefix(HISTORY_PREFIX + ".")
    return {"lh.obj": "objects", "lh.cmd": "commands", "lh.res": "results"}.get(subject[:6], "other")


async def history_bytes(js: Any) -> tuple[int, int, dict[str, int], dict[str, int]]:
    """(messages, bytes) of LH_HISTORY as JetStream accounts them, and messages and payload+header
    bytes by origin (read back one by one)."""
    info = await js.stream_info(HISTORY_STREAM)
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        message = await js.get_msg(HISTORY_STREAM, seq)
        kind = origin(message.subject or "")
        counts[kind] += 1
        headers = sum(len(k) + len(v) + 4 for k, v in (message.headers or {}).items())
        sizes[kind] += len(message.data or b"") + headers + len(message.subject or "")
    return info.state.messages, info.state.bytes, dict(counts), dict(sizes)


async def measure(options: Options) -> dict[str, Any]:
    seed = resized(demo_seed(), nodes=options.nodes, volumes=options.volumes)
    volumes = len(all_volumes(seed))
    config = dataclasses.replace(
        fast_config(live_upgrade_seconds=0.5, engine_image_deploy_seconds=0.2),
        images=dict(seed.image_profiles),
    )
    nats = BinaryNats()
    nats.start()
    try:
        bus = await connect(nats.url, name="bench-history")
        await prepare_bus(bus, attempts=40)
        async with SandboxCluster(seed, sim_config=config) as cluster:
            kubeconfig = str(cluster.kubeconfig_path)
            stack = [watcher(kubeconfig, nats.url), actuator(kubeconfig, nats.url), engine_upgrade(nats.url)]
            try:
                deadline = time.monotonic() + READY_TIMEOUT_S
                while not all(s.ready for s in stack):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"services not ready in {READY_TIMEOUT_S:.0f} s")
                    await asyncio.sleep(0.05)
                start_messages, start_bytes, _, _ = await history_bytes(bus.js)
                began = time.monotonic()
                await bring_engine_image(kubeconfig, seed.namespace, DEMO_IMAGE, on_step=lambda _: None)
                upgraded = await wait_wave_over(kubeconfig, seed.namespace, DEMO_IMAGE)
                wave_s = time.monotonic() - began
                wave_messages, wave_bytes, counts, sizes = await history_bytes(bus.js)
                await asyncio.sleep(options.idle_s)  # a measured quiet spell: nothing to wait for
                idle_messages, _, _, _ = await history_bytes(bus.js)
            finally:
                for service in reversed(stack):
                    await service.stop()
        await bus.close()
    finally:
        nats.stop()

    per_message = {kind: round(sizes[kind] / counts[kind], 1) for kind in counts}
    accounted_per_message = wave_bytes / wave_messages
    object_event_bytes = accounted_per_message * sizes.get("objects", 0) / max(1, sum(sizes.values()))
    object_event_bytes /= counts.get("objects", 1) / wave_messages
    wave_per_volume = (wave_bytes - start_bytes) / volumes
    steady_per_volume_day = STATED_EVENTS_PER_VOLUME_PER_HOUR * 24 * object_event_bytes
    per_volume_day = steady_per_volume_day + WAVES_PER_DAY * wave_per_volume
    retention_days = DEFAULT_MAX_AGE_S / 86400
    per_volume_retention = per_volume_day * retention_days
    return {
        "cluster": {"volumes": volumes, "nodes": len(seed.nodes), "upgraded_in_wave": upgraded},
        "wave_seconds": round(wave_s, 1),
        "history_messages_before_wave": start_messages,
        "history_bytes_before_wave": start_bytes,
        "history_messages_after_wave": wave_messages,
        "history_bytes_after_wave": wave_bytes,
        "messages_by_origin": counts,
        "payload_header_subject_bytes_per_message_by_origin": per_message,
        "accounted_bytes_per_message": round(accounted_per_message, 1),
        "accounted_bytes_per_object_event": round(object_event_bytes, 1),
        "wave_messages_per_volume": round((wave_messages - start_messages) / volumes, 1),
        "wave_bytes_per_volume": round(wave_per_volume),
        "idle_seconds": options.idle_s,
        "idle_object_events_per_volume_per_hour_measured": round(
            (idle_messages - wave_messages) / volumes / options.idle_s * 3600, 2
        ),
        "stated_object_events_per_volume_per_hour": STATED_EVENTS_PER_VOLUME_PER_HOUR,
        "stated_waves_per_day": WAVES_PER_DAY,
        "bytes_per_volume_per_day": round(per_volume_day),
        "bytes_per_volume_per_retention": round(per_volume_retention),
        "retention_days": retention_days,
        "volumes_in_default_max_bytes_for_the_retention": int(DEFAULT_MAX_BYTES // per_volume_retention),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 nodes, 6 volumes, a short idle spell")
    parser.add_argument("--volumes", type=int, default=None)
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--idle-s", type=float, default=Options.idle_s)
    args = parser.parse_args(argv)
    small = args.quick or quick()
    options = QUICK if small else Options(args.volumes, args.nodes, args.idle_s)
    name = "history_quick" if small else "history"
    write_report(name, asyncio.run(measure(options)))


if __name__ == "__main__":
    main()
