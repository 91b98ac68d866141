"""How long a decision service is without a leader after its leader is killed with SIGKILL.

Two replicas of engine-upgrade run as real processes (`python -m corral_engine_upgrade`, default
lease TTL) on a nats-server of their own. Each run: wait until the standby has watched the leader
renew twice (so it is warm and has seen the lease), wait a random part of a renewal period (a crash
can come at any point of it), SIGKILL the leader, and time until the standby's `/metrics` says
`corral_leader 1` (`failover_s`) and until the lease key names it (`lease_key_s`). A fresh replica
then starts as the next standby, so the runs chain and each costs one process start.

Figures: p50 and max of both over `RUNS` runs, the bounds the lease promises
(`corral_bus.lease.fast_failover` for a holder whose connection closed, as here, and
`worst_failover` for one that went silent with its connection open), and
`calibration_empty_call_ns` before and after (the machine is shared; see bench_engine_upgrade).
Writes bench/results/failover.json. Measures; never asserts.
`python bench/bench_failover.py 10` runs with another lease TTL (10 s: before issue 19), for a
look only: no report is written.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import msgspec  # noqa: E402
from nats.js.errors import KeyNotFoundError  # noqa: E402

from bench.bench_engine_upgrade import calibration_ns  # noqa: E402
from bench.report import scaled, write_report  # noqa: E402
from corral_bus import Bus, connect, ensure_streams  # noqa: E402
from corral_bus.lease import LeaseRecord, fast_failover, open_bucket, worst_failover  # noqa: E402
from corral_engine_upgrade.service import DEFINITION  # noqa: E402
from tests.fixtures.bus_traffic import FakeWatcher  # noqa: E402
from tests.fixtures.nats import BinaryNats  # noqa: E402
from tests.fixtures.processes import ServiceProcess, eventually, free_port, python_module  # noqa: E402

RUNS = scaled(5, 1)
SERVICE = DEFINITION.name
DEFAULT_TTL = DEFINITION.config().lease_ttl_s
TTL = float(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TTL
POLL_S = 0.005


class Replica:
    """One engine-upgrade process and its metrics port."""

    def __init__(self, index: int, nats_url: str, log_dir: Path) -> None:
        self.instance = f"eu-{index}"
        self.port = free_port()
        env = {
            "CORRAL_NATS_URL": nats_url,
            "CORRAL_INSTANCE": self.instance,
            "CORRAL_HEALTH_HOST": "127.0.0.1",
            "CORRAL_HEALTH_PORT": str(self.port),
            "CORRAL_LOG_LEVEL": "warning",
            "CORRAL_UPGRADE_GATE": "false",
            "CORRAL_LEASE_TTL_S": str(TTL),
        }
        self.process = ServiceProcess(self.instance, python_module("corral_engine_upgrade"), env, log_dir)

    async def leads(self, session: aiohttp.ClientSession) -> bool | None:
        """True/False from its `corral_leader` gauge; None while it does not answer."""
        try:
            async with session.get(f"http://127.0.0.1:{self.port}/metrics") as response:
                text = await response.text()
        except aiohttp.ClientError:
            return None
        for line in text.splitlines():
            if line.startswith("corral_leader "):
                return float(line.split()[1]) == 1.0
        return None


async def lease_key(bus: Bus) -> tuple[str, int]:
    """(holder, revision) of the service's lease key; ("", 0) when there is none."""
    kv = await open_bucket(bus)
    try:
        entry = await kv.get(SERVICE)
    except KeyNotFoundError:
        return "", 0
    if not entry.value:
        return "", entry.revision or 0
    return msgspec.json.decode(entry.value, type=LeaseRecord).holder, entry.revision or 0


async def renewed_twice(bus: Bus) -> None:
    """Return after the leader's lease key has moved on twice since the call."""
    _, start = await lease_key(bus)

    async def moved() -> bool:
        return (await lease_key(bus))[1] >= start + 2

    await eventually(moved, within=4 * TTL, what="two renewals", interval=POLL_S)


async def one_failover(
    bus: Bus, session: aiohttp.ClientSession, leader: Replica, standby: Replica, rng: random.Random
) -> dict[str, float]:
    await eventually(
        lambda: _is(standby.leads(session), False), within=60, what=f"{standby.instance} standing by"
    )
    await renewed_twice(bus)
    await asyncio.sleep(rng.uniform(0, TTL / 4))  # the crash lands anywhere in a renewal period
    assert leader.process.proc is not None
    leader.process.proc.kill()
    killed = time.monotonic()
    key_at: list[float] = []

    async def holder_is_standby() -> bool:
        return (await lease_key(bus))[0] == standby.instance

    async def key_moved() -> None:
        await eventually(holder_is_standby, within=30, what="lease key moved", interval=POLL_S)
        key_at.append(time.monotonic())

    watcher = asyncio.create_task(key_moved())
    await eventually(lambda: _is(standby.leads(session), True), within=30, what="takeover", interval=POLL_S)
    led_at = time.monotonic()
    await asyncio.wait_for(watcher, 30)
    await leader.process.proc.wait()
    return {"failover_s": led_at - killed, "lease_key_s": key_at[0] - killed}


async def _is(value: Any, wanted: bool) -> bool:
    return (await value) is wanted


def summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 3), "max": round(max(values), 3)}


async def run(nats_url: str, log_dir: Path) -> dict[str, Any]:
    bus = await connect(nats_url, name="bench-failover")
    await ensure_streams(bus.js)
    # A replica campaigns once its view is bootstrapped: every kind it reads listed (no objects).
    await FakeWatcher(bus).resync(DEFINITION.reads)
    rng = random.Random(19)
    runs: list[dict[str, float]] = []
    replicas = [Replica(0, nats_url, log_dir)]
    await replicas[0].process.start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as session:
            await eventually(lambda: _is(replicas[0].leads(session), True), within=60, what="first leader")
            for index in range(1, RUNS + 1):
                standby = Replica(index, nats_url, log_dir)
                replicas.append(standby)
                await standby.process.start()
                runs.append(await one_failover(bus, session, replicas[-2], standby, rng))
                print(f"run {index}: {runs[-1]}", flush=True)
    finally:
        for replica in replicas:
            await replica.process.stop()
        await bus.close()
    return {
        "runs": RUNS,
        "lease_ttl_s": TTL,
        "bound_s": round(worst_failover(TTL), 3),
        "fast_bound_s": round(fast_failover(TTL), 3),
        "failover_s": summary([r["failover_s"] for r in runs]),
        "lease_key_s": summary([r["lease_key_s"] for r in runs]),
        "each_failover_s": [round(r["failover_s"], 3) for r in runs],
    }


def main() -> None:
    figures: dict[str, Any] = {"calibration_empty_call_ns_before": round(calibration_ns(), 1)}
    server = BinaryNats()
    server.start()
    try:
        logs = Path(tempfile.mkdtemp(prefix="corral-failover-"))  # kept: the replicas' logs
        figures.update(asyncio.run(run(server.url, logs)))
    finally:
        server.stop()
    figures["calibration_empty_call_ns_after"] = round(calibration_ns(), 1)
    if TTL != DEFAULT_TTL:
        print(figures)
        return  # a look at another TTL, not the report
    write_report(
        "failover",
        figures,
        floors={
            "failover_s": "max <= 3 after kill -9 of a decision service's leader (issue 19 part 4);"
            " max <= 1 for a warm standby (issue 28)"
        },
    )


if __name__ == "__main__":
    main()
