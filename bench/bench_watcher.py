"""Watcher throughput: events/s from an emulator watch stream to acked on LH_OBJECTS, and CPU/event.

Three processes, as in production: the sandbox emulator (its own process, serving as fast as it
can), a nats-server with JetStream (file storage, the contract's stream settings), and this process,
which is the watcher. The emulator is loaded with N realistic Longhorn volumes (managedFields, the
last-applied annotation, full spec and status: what a real API server sends), the watcher lists and
publishes them, then K rounds of changes to every volume are written into the emulator's history
while no watch is open. The measured part is the watcher resuming its watch from the list's
resourceVersion: the emulator replays N*K events back to back, and the clock stops when the last
one is acknowledged by JetStream. `cpu_us_per_event` is this process's CPU time over that window;
`watcher_cpu_share` (CPU seconds per wall second) and `load_average_1m` tell whether the rate was
limited by the watcher or by a machine shared with other work.

    .venv/bin/python bench/bench_watcher.py [--volumes 2000] [--rounds 50] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import uvloop

from corral_bus import StreamSettings, connect, ensure_streams
from corral_kube.client import api_client
from corral_model.kinds import KINDS
from corral_sandbox.emulator import EmulatorControl
from corral_watcher.kindwatch import KindWatcher, WatchSettings
from corral_watcher.metrics import WatcherMetrics
from corral_watcher.publishing import OrderedPublisher

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.profiles import top
from bench.report import quick, scaled, write_report

NAMESPACE = "longhorn-system"
STALL_S = 60.0
"""The bench gives up, saying so, when no event is stored (or no set-up step answers) this long."""
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def volume(i: int, round_: int) -> dict[str, Any]:
    """A Longhorn Volume the size a real API server sends (about 3 KB of JSON)."""
    name = f"pvc-{i:06d}-bench"
    node = f"node-{i % 50}.cluster.example.com"
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Volume",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"longhornvolume": name, "recurring-job-group.longhorn.io/default": "enabled"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": '{"apiVersion":"longhorn.io/v1beta2"}'
                * 8,
            },
            "finalizers": ["longhorn.io"],
            "generation": 3 + round_,
            "managedFields": [
                {
                    "apiVersion": "longhorn.io/v1beta2",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:finalizers": {".": {}, 'v:"longhorn.io"': {}}},
                        "f:spec": {
                            f"f:{k}": {} for k in ("image", "size", "frontend", "nodeID", "dataLocality")
                        },
                    },
                    "manager": "longhorn-manager",
                    "operation": "Update",
                    "time": "2026-11-01T10:00:00Z",
                },
                {
                    "apiVersion": "longhorn.io/v1beta2",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {f"f:{k}": {} for k in ("state", "robustness", "currentImage")}},
                    "manager": "longhorn-manager",
                    "operation": "Update",
                    "subresource": "status",
                    "time": "2026-11-01T10:00:00Z",
                },
            ],
        },
        "spec": {
            "Standby": False,
            "accessMode": "rwo",
            "backingImage": "",
            "backupCompressionMethod": "lz4",
            "dataEngine": "v1",
            "dataLocality": "disabled",
            "dataSource": "",
            "disableFrontend": False,
            "diskSelector": [],
            "encrypted": False,
            "engineImage": "",
            "fromBackup": "",
            "frontend": "blockdev",
            "image": f"longhornio/longhorn-engine:v1.{7 + round_ % 2}.0",
            "lastAttachedBy": "",
            "migratable": False,
            "migrationNodeID": "",
            "nodeID": node,
            "nodeSelector": [],
            "numberOfReplicas": 3,
            "replicaAutoBalance": "ignored",
            "revisionCounterDisabled": True,
            "size": "21474836480",
            "snapshotDataIntegrity": "ignored",
            "snapshotMaxCount": 250,
            "staleReplicaTimeout": 30,
            "unmapMarkSnapChainRemoved": "ignored",
        },
        "status": {
            "actualSize": 1048576 * (round_ + 1),
            "cloneStatus": {"snapshot": "", "sourceVolume": "", "state": ""},
            "conditions": [
                {
                    "lastProbeTime": "",
                    "lastTransitionTime": "2026-11-01T10:00:00Z",
                    "message": "",
                    "reason": "",
                    "status": "False",
                    "type": t,
                }
                for t in ("TooManySnapshots", "Scheduled", "Restore", "WaitForBackingImage")
            ],
            "currentImage": f"longhornio/longhorn-engine:v1.{7 + round_ % 2}.0",
            "currentNodeID": node,
            "frontendDisabled": False,
            "isStandby": False,
            "kubernetesStatus": {
                "namespace": "default",
                "pvName": name,
                "pvStatus": "Bound",
                "pvcName": f"data-{i}",
                "workloadsStatus": [
                    {"podName": f"app-{i}-0", "podStatus": "Running", "workloadName": f"app-{i}"}
                ],
            },
            "lastBackup": "",
            "ownerID": node,
            "robustness": "healthy",
            "shareEndpoint": "",
            "shareState": "",
            "state": "attached",
        },
    }


class Processes:
    """nats-server and the emulator, each in its own process; stopped whatever happens."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.children: list[subprocess.Popen[bytes]] = []
        self.nats_url = ""
        self.emulator_url = ""
        self.kubeconfig = workdir / "kubeconfig"

    def start(self, history: int) -> None:
        binary = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or "nats-server"
        port = free_port()
        self.children.append(
            subprocess.Popen(
                [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(self.workdir / "js")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        self.nats_url = f"nats://127.0.0.1:{port}"
        emulator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "corral_sandbox.emulator",
                "--kubeconfig",
                str(self.kubeconfig),
                "--history-size",
                str(history),
            ],
            stdout=subprocess.PIPE,
        )
        self.children.append(emulator)
        assert emulator.stdout is not None
        line = emulator.stdout.readline().decode()
        if not line.startswith("READY "):
            raise RuntimeError(f"emulator did not start: {line!r}")
        self.emulator_url = line.split()[1]

    def stop(self) -> None:
        for child in reversed(self.children):
            child.terminate()
        for child in self.children:
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()


async def wait_for_nats(url: str) -> None:
    deadline = time.monotonic() + 20
    while True:
        try:
            bus = await connect(url, name="bench-probe", max_reconnect_attempts=0)
            await bus.close()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def load(control: EmulatorControl, volumes: int, round_: int) -> None:
    """Write one version of every volume (in slices: the control endpoint takes bodies up to 1 MB)."""
    step = 200
    for start in range(0, volumes, step):
        batch = [volume(i, round_) for i in range(start, min(volumes, start + step))]
        await control.load("longhorn.io", "volumes", batch)


async def run(volumes: int, rounds: int, profile: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-watcher-") as tmp:
        procs = Processes(Path(tmp))
        try:
            procs.start(history=volumes * (rounds + 2))
            await wait_for_nats(procs.nats_url)
            return await measure(procs, volumes, rounds, profile)
        finally:
            procs.stop()


async def within(what: str, step: Awaitable[T]) -> T:
    """A set-up step that answers within STALL_S, or an error naming it: never a silent hang."""
    try:
        async with asyncio.timeout(STALL_S):
            return await step
    except TimeoutError:
        raise RuntimeError(f"{what}: no answer within {STALL_S:.0f} s") from None


async def stop_following(follow: asyncio.Task[str]) -> None:
    """Cancel the watch until it ends: a cancel that lands as a watch read completes is dropped by
    Python 3.11's wait_for, and one wait on the task then hung the bench for good."""
    while not follow.done():
        follow.cancel()
        await asyncio.wait({follow}, timeout=1.0)
    if not follow.cancelled() and follow.exception() is not None:
        raise RuntimeError("the watch failed") from follow.exception()


async def measure(procs: Processes, volumes: int, rounds: int, profile: str | None) -> dict[str, Any]:
    control = EmulatorControl(procs.emulator_url)
    bus = await within("connecting to NATS", connect(procs.nats_url, name="bench-watcher"))
    await within("creating the streams", ensure_streams(bus.js, StreamSettings()))
    api = await api_client(str(procs.kubeconfig))
    publisher = OrderedPublisher(bus)
    await within("starting the publisher", publisher.start())
    metrics = WatcherMetrics()
    kind = KindWatcher(api, KINDS["volume"], WatchSettings(namespace=NAMESPACE), publisher, metrics)
    try:
        await within("loading the volumes into the emulator", load(control, volumes, 0))
        list_started = time.perf_counter()
        await within("the initial list", kind.relist("initial"))
        await within("storing the initial list", publisher.flush())
        list_elapsed = time.perf_counter() - list_started
        for round_ in range(1, rounds + 1):
            await within(f"loading round {round_}", load(control, volumes, round_))
        events = volumes * rounds
        acked_before = publisher.acked
        profiler = cProfile.Profile(time.process_time) if profile else None
        cpu0, t0 = time.process_time(), time.perf_counter()
        if profiler:
            profiler.enable()
        follow = asyncio.create_task(kind.follow())
        progress, stalled_at = publisher.acked, time.monotonic()
        while publisher.acked - acked_before < events:
            if follow.done():
                follow.result()
                raise RuntimeError("the watch ended before every event was published")
            if publisher.acked != progress:
                progress, stalled_at = publisher.acked, time.monotonic()
            elif time.monotonic() - stalled_at > STALL_S:  # never a silent hang
                raise RuntimeError(
                    f"no event acknowledged for {STALL_S:.0f} s: {publisher.acked - acked_before}"
                    f" of {events} stored"
                )
            await asyncio.sleep(0.005)
        t1, cpu1 = time.perf_counter(), time.process_time()
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)  # type: ignore[arg-type]
        await stop_following(follow)
        info = await within("reading the stream's state", bus.js.stream_info("LH_OBJECTS"))
        elapsed = t1 - t0
        return {
            "watcher_cpu_share": round((cpu1 - cpu0) / elapsed, 2),
            "events_per_s": round(events / elapsed),
            "cpu_us_per_event": round((cpu1 - cpu0) / events * 1e6, 2),
            # The rate one free core would give the watcher: on a busy machine events_per_s says
            # more about the neighbours than about the watcher (see watcher_cpu_share).
            "events_per_cpu_s": round(events / (cpu1 - cpu0)),
            "events": events,
            "initial_list_objects_per_s": round(volumes / list_elapsed),
            "volumes": volumes,
            "elapsed_s": round(elapsed, 3),
            "stream_messages": info.state.messages,
            "publisher_recoveries": publisher.recoveries,
            "watch_restarts": metrics.value(
                "corral_watcher_watch_restarts_total", kind="volume", reason="error"
            ),
        }
    finally:
        await within("closing the publisher", publisher.close())
        await within("closing the API client", api.close())
        await within("closing the NATS connection", bus.close())
        await within("closing the emulator's control", control.close())


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--volumes", type=int, default=scaled(2000, 200))
    parser.add_argument("--rounds", type=int, default=scaled(40, 2))
    parser.add_argument("--profile", help="write a cProfile of the measured window here")
    parser.add_argument("--no-report", action="store_true", help="print only; keep bench/results as is")
    parser.add_argument(
        "--asyncio", action="store_true", help="asyncio's own loop instead of uvloop (the service's)"
    )
    args = parser.parse_args()
    if not args.asyncio:
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench-watcher-profile-") as tmp:
        stats = str(Path(tmp) / "watcher.prof")
        if quick():
            # Figures that mean nothing: the measured pass itself is profiled, so a quick run
            # starts its processes once, as it did before profiles were reported.
            figures = asyncio.run(run(args.volumes, args.rounds, stats))
        else:
            figures = asyncio.run(run(args.volumes, args.rounds, args.profile))
            # Where its CPU goes: a pass of its own, profiled (bench/profiles.py), a quarter as long.
            asyncio.run(run(args.volumes, max(2, args.rounds // 4), stats))
        figures["profile"] = top(stats)
    figures["event_loop"] = "asyncio" if args.asyncio else "uvloop"
    # Other work on the machine shows up in these figures: say how busy it was.
    figures["load_average_1m"] = round(max(load_before, os.getloadavg()[0]), 2)
    figures["cpus"] = os.cpu_count()
    if args.no_report:
        print(figures)
    else:
        write_report(
            "watcher",
            figures,
            {"events_per_s": ">= 20000 (goal >= 45000)", "cpu_us_per_event": "informative"},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
