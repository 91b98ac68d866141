"""A decision service's scan of its queued commands in LH_COMMANDS (issue 19 part 4): one request
per queued command before, one per 256 now (batched direct get, corral_bus.batchget).
`python -m bench.bench_command_scan` writes bench/results/command_scan.json.

A takeover (and every reconnect) reads the service's commands still queued in the work queue. With
the actuator away (the case where the queue is long: it is what drains it) 5 000 commands of
engine-upgrade wait, interleaved with 500 of another service. Each scan is timed ROUNDS times both
ways on a nats-server of its own: `CommandFeed.scan` (batched) and `CommandFeed._scan_one_by_one`
(the previous way, still the fallback where a stream allows no direct get). Figures: the median
scan time (ms) and requests per scan of each, and their ratio; load average and the host-speed
calibration as the other benches record them. Measures only.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.bench_engine_upgrade import calibration_ns  # noqa: E402
from bench.report import scaled, write_report  # noqa: E402
from corral_bus import Publisher, connect, ensure_streams  # noqa: E402
from corral_decision.command_feed import CommandFeed  # noqa: E402
from corral_model import codec  # noqa: E402
from corral_model.envelopes import FieldValue, Target, Verb, new_command  # noqa: E402
from corral_model.subjects import command_subject  # noqa: E402
from corral_runtime.logs import get_logger  # noqa: E402
from tests.fixtures.nats import BinaryNats  # noqa: E402

QUEUED = scaled(5_000, 300)
OTHERS = scaled(500, 30)
ROUNDS = scaled(5, 1)
NS = "longhorn-system"


async def fill(url: str) -> None:
    bus = await connect(url, "bench-fill")
    await ensure_streams(bus.js)
    publisher = Publisher(bus)
    for i in range(QUEUED):
        service = "im-restart" if i % (QUEUED // OTHERS) == 0 else "engine-upgrade"
        command = new_command(
            service="engine-upgrade",
            verb=Verb.PATCH,
            target=Target(kind="Volume", namespace=NS, name=f"pvc-{i}"),
            changes=(FieldValue(path="/spec/image", value="new"),),
            preconditions=(FieldValue(path="/spec/image", value="old"),),
            created_at=time.time(),
        )
        await publisher.publish(
            command_subject("engine-upgrade", "volume", NS, f"pvc-{i}"),
            codec.encode(command),
            msg_id=command.id,
        )
        if service == "im-restart":
            other = new_command(
                service="im-restart",
                verb=Verb.DELETE,
                target=Target(kind="Pod", namespace=NS, name=f"im-{i}"),
                created_at=time.time(),
            )
            subject = command_subject("im-restart", "pod", NS, f"im-{i}")
            await publisher.publish(subject, codec.encode(other), msg_id=other.id)
    await publisher.flush()
    await publisher.close()
    await bus.close()


async def measure(url: str) -> dict[str, Any]:
    await fill(url)
    bus = await connect(url, "bench-scan")
    counted: list[int] = [0]
    feed = CommandFeed(bus, "engine-upgrade", lambda c: counted.__setitem__(0, counted[0] + 1), get_logger())
    batched: list[float] = []
    single: list[float] = []
    batched_requests = single_requests = 0
    for _ in range(ROUNDS):
        before = feed.round_trips
        start = time.perf_counter()
        found = await feed.scan()
        batched.append((time.perf_counter() - start) * 1000)
        batched_requests = feed.round_trips - before
        assert found == QUEUED
        before = feed.round_trips
        start = time.perf_counter()
        found = await feed._scan_one_by_one()
        single.append((time.perf_counter() - start) * 1000)
        single_requests = feed.round_trips - before
        assert found == QUEUED
    await bus.close()
    batched_ms, single_ms = statistics.median(batched), statistics.median(single)
    return {
        "queued_commands": QUEUED,
        "other_services_commands": OTHERS,
        "batched_scan_ms": round(batched_ms, 1),
        "batched_requests_per_scan": batched_requests,
        "one_by_one_scan_ms": round(single_ms, 1),
        "one_by_one_requests_per_scan": single_requests,
        "speedup": round(single_ms / batched_ms, 1),
    }


def main() -> None:
    figures: dict[str, Any] = {"calibration_empty_call_ns_before": round(calibration_ns(), 1)}
    server = BinaryNats()
    server.start()
    try:
        figures.update(asyncio.run(measure(server.url)))
    finally:
        server.stop()
    figures["calibration_empty_call_ns_after"] = round(calibration_ns(), 1)
    figures["load_average_1m"] = round(os.getloadavg()[0], 2)
    write_report(
        "command_scan",
        figures,
        floors={
            "batched_requests_per_scan": "ceil(queued / 256): no request per queued command (issue 19 part 4)"
        },
    )


if __name__ == "__main__":
    main()
