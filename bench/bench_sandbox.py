"""How much the sandbox's Kubernetes API emulator carries, so it is never what a service benchmark measures.

The emulator runs in its own process (`python -m corral_sandbox.emulator`, uvloop), as in every other
benchmark; clients are kubernetes-asyncio through a kubeconfig unless a figure says "raw" (aiohttp +
msgspec, i.e. what a lean watcher does). On a 2-core machine shared with other work, wall-clock rates
mostly measure the *client* (kubernetes-asyncio spends several times the server's CPU per request), so
each rate comes with the CPU seconds each side spent:

* `patches_per_s`: the emulator's patch capacity = merge patches handled per second of emulator CPU,
  while kubernetes-asyncio clients (64 in flight) drive it flat out; `patches_per_s_wall` is what those
  clients achieved, with `server_cpu_us_per_patch` / `client_cpu_us_per_patch` beside it;
  `json_patches_per_s` the same for the actuator's shape (JSON Patch with `test` preconditions);
* `lists_per_s_1k` / `list_objects_per_s`: listing 1 000 volumes with kubernetes-asyncio;
* with 100 000 realistic volumes loaded: `load_100k_s` (seeding through /_sandbox/load) and
  `load_100k_server_cpu_s`,
  `server_rss_mb_100k` and `server_kb_per_volume`, `list_100k_s` (kubernetes-asyncio) and
  `list_100k_raw_s` (aiohttp + msgspec), `list_100k_server_cpu_s`;
* `watch_events_per_s`: a raw watch replaying 100 000 MODIFIED events from the history (read in large
  chunks, each line decoded with msgspec into a slim Struct); `watch_initial_events_per_s`: the
  synthetic ADDED events of a watch from resourceVersion 0; `watch_server_cpu_us_per_event` and
  `watch_client_cpu_us_per_event` (the client, not the emulator, is what caps the rate),
  `watch_server_capacity_events_per_s` (events per second of emulator CPU);
  `watch_fanout_events_per_s`: aggregate over `FANOUT` concurrent raw watchers replaying the same
  history; `watch_k8s_asyncio_events_per_s`: kubernetes-asyncio's Watch.

Writes bench/results/sandbox.json. Measures; never asserts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
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

import aiohttp  # noqa: E402
import msgspec  # noqa: E402
import uvloop  # noqa: E402
from kubernetes_asyncio import client, watch  # noqa: E402

from bench.report import scaled, write_report  # noqa: E402
from corral_kube.client import api_client  # noqa: E402
from corral_sandbox.emulator import EmulatorControl  # noqa: E402

NS = "longhorn-system"
LH = ("longhorn.io", "v1beta2")
VOLUMES_PATH = f"/apis/longhorn.io/v1beta2/namespaces/{NS}/volumes"
PATCH_VOLUMES = 1_000
PATCHES = int(os.environ.get("BENCH_SANDBOX_PATCHES", str(scaled(6000, 1000))))
IN_FLIGHT = 64
TICK_S = 0.01
"""The resolution of a process's CPU time in /proc: a quick run may use less than one tick."""
BIG = int(os.environ.get("BENCH_SANDBOX_VOLUMES", str(scaled(100000, 2000))))
FANOUT = 4
K8S_WATCH_EVENTS = min(20_000, BIG)


ENGINE_IMAGE = "longhornio/longhorn-engine:v1.7.2"


def volume(i: int, size: str = "10737418240", nodes: int = 10, robustness: str = "healthy") -> dict[str, Any]:
    """A volume shaped like a real Longhorn one (about 1 KB of JSON), attached to and owned by one
    of `nodes` nodes (`node-<n>`)."""
    node = f"node-{i % nodes}"
    image = ENGINE_IMAGE
    return {
        "apiVersion": "longhorn.io/v1beta2",
        "kind": "Volume",
        "metadata": {
            "name": f"pvc-{i:08d}-5c1e-4b8f-9a3d-2f6b7c8d9e0f",
            "namespace": NS,
            "labels": {
                "longhornvolume": f"pvc-{i:08d}",
                "recurring-job-group.longhorn.io/default": "enabled",
            },
            "finalizers": ["longhorn.io"],
        },
        "spec": {
            "image": image,
            "numberOfReplicas": 3,
            "size": size,
            "dataEngine": "v1",
            "nodeID": node,
            "frontend": "blockdev",
            "dataLocality": "disabled",
            "accessMode": "rwo",
            "migratable": False,
            "staleReplicaTimeout": 30,
            "replicaAutoBalance": "ignored",
            "snapshotDataIntegrity": "ignored",
            "revisionCounterDisabled": True,
        },
        "status": {
            "state": "attached",
            "robustness": robustness,
            "currentImage": image,
            "ownerID": node,
            "currentNodeID": node,
            "isStandby": False,
            "expansionRequired": False,
            "restoreRequired": False,
            "actualSize": 1073741824,
            "conditions": [
                {"type": "Scheduled", "status": "True", "reason": "", "message": ""},
                {"type": "Restore", "status": "False", "reason": "", "message": ""},
            ],
        },
    }


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.contextmanager
def emulator_process(workdir: Path, history: int) -> Iterator[tuple[subprocess.Popen[bytes], str, str]]:
    kubeconfig = workdir / "kubeconfig"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "corral_sandbox.emulator",
            "--exit-with-parent",
            "--kubeconfig",
            str(kubeconfig),
            "--history-size",
            str(history),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        if not line.startswith("READY "):
            raise RuntimeError(f"emulator did not start: {line!r}")
        yield proc, line.split()[1], str(kubeconfig)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


async def load(control: EmulatorControl, count: int, size: str = "10737418240") -> None:
    step = 5_000
    for start in range(0, count, step):
        await control.load(
            "longhorn.io", "volumes", [volume(i, size) for i in range(start, min(count, start + step))]
        )


async def bench_patches(pid: int, kubeconfig: str, control: EmulatorControl) -> dict[str, Any]:
    await load(control, PATCH_VOLUMES)
    names = [volume(i)["metadata"]["name"] for i in range(PATCH_VOLUMES)]
    api = await api_client(kubeconfig, max_connections=IN_FLIGHT)
    crs: Any = client.CustomObjectsApi(api)
    figures: dict[str, Any] = {}
    try:

        async def run(make: Any, content_type: str, count: int) -> tuple[float, float, float]:
            todo = iter(range(count))

            async def worker() -> None:
                for i in todo:
                    await crs.patch_namespaced_custom_object(
                        *LH, NS, "volumes", names[i % PATCH_VOLUMES], make(i), _content_type=content_type
                    )

            server0, client0, t0 = cpu_s(pid), time.process_time(), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
            return time.perf_counter() - t0, cpu_s(pid) - server0, time.process_time() - client0

        await run(lambda i: {"spec": {"size": str(i)}}, "application/merge-patch+json", 500)  # warm up
        wall, server, own = await run(
            lambda i: {"spec": {"size": str(i)}}, "application/merge-patch+json", PATCHES
        )
        figures.update(
            patches_per_s=round(PATCHES / max(server, TICK_S)),
            patches_per_s_wall=round(PATCHES / wall),
            server_cpu_us_per_patch=round(server / PATCHES * 1e6),
            client_cpu_us_per_patch=round(own / PATCHES * 1e6),
        )
        current = {n: "" for n in names}

        def guarded(i: int) -> list[dict[str, Any]]:
            name = names[i % PATCH_VOLUMES]
            ops: list[dict[str, Any]] = [{"op": "replace", "path": "/spec/image", "value": f"img-{i}"}]
            if current[name]:
                ops.insert(0, {"op": "test", "path": "/spec/image", "value": current[name]})
            current[name] = f"img-{i}"
            return ops

        count = PATCHES // 2
        wall, server, own = await run(guarded, "application/json-patch+json", count)
        figures.update(
            json_patches_per_s=round(count / max(server, TICK_S)), json_patches_per_s_wall=round(count / wall)
        )
        t0 = time.perf_counter()
        lists = 20
        for _ in range(lists):
            await crs.list_namespaced_custom_object(*LH, NS, "volumes")
        elapsed = time.perf_counter() - t0
        figures.update(
            lists_per_s_1k=round(lists / elapsed, 1),
            list_objects_per_s=round(lists * PATCH_VOLUMES / elapsed),
        )
    finally:
        await api.close()
    return figures


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""


class _Object(msgspec.Struct):
    metadata: _Meta


class _Event(msgspec.Struct):
    type: str
    object: _Object


async def raw_watch(session: aiohttp.ClientSession, url: str, rv: str, count: int) -> float:
    """Seconds until `count` events were read and decoded from a watch starting at `rv`.

    Reads the stream in large chunks and decodes each line with msgspec into a slim Struct (event type,
    name, resourceVersion), as a lean watcher decodes into its slim Structs; aiohttp's line iterator
    alone caps a client near 25 000 lines/s on this machine."""
    decoder = msgspec.json.Decoder(_Event)
    seen = 0
    tail = b""
    t0 = time.perf_counter()
    params = {"watch": "1", "resourceVersion": rv, "timeoutSeconds": "600"}
    async with session.get(
        url + VOLUMES_PATH, params=params, timeout=aiohttp.ClientTimeout(total=None)
    ) as resp:
        async for chunk in resp.content.iter_chunked(1 << 20):
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                if decoder.decode(line).type in ("ADDED", "MODIFIED", "DELETED"):
                    seen += 1
            if seen >= count:
                break
    return time.perf_counter() - t0


async def bench_big(pid: int, url: str, kubeconfig: str, control: EmulatorControl) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    rss0 = rss_mb(pid)
    server0, t0 = cpu_s(pid), time.perf_counter()
    await load(control, BIG)
    figures["load_100k_s"] = round(time.perf_counter() - t0, 2)
    figures["load_100k_server_cpu_s"] = round(cpu_s(pid) - server0, 2)
    rss1 = rss_mb(pid)
    figures["server_rss_mb_100k"] = round(rss1, 1)
    figures["server_kb_per_volume"] = round((rss1 - rss0) * 1024 / BIG, 2)

    api = await api_client(kubeconfig)
    crs: Any = client.CustomObjectsApi(api)
    try:
        server0, t0 = cpu_s(pid), time.perf_counter()
        listed = await crs.list_namespaced_custom_object(*LH, NS, "volumes")
        figures["list_100k_s"] = round(time.perf_counter() - t0, 2)
        figures["list_100k_server_cpu_s"] = round(cpu_s(pid) - server0, 2)
        assert len(listed["items"]) >= BIG
        rv = listed["metadata"]["resourceVersion"]
        del listed

        async with aiohttp.ClientSession() as session:
            t0 = time.perf_counter()
            async with session.get(url + VOLUMES_PATH) as resp:
                body = await resp.read()
            # A client building 100 000 objects should not let the cycle collector walk them meanwhile.
            gc.disable()
            msgspec.json.decode(body)
            gc.enable()
            figures["list_100k_raw_s"] = round(time.perf_counter() - t0, 2)
            figures["list_100k_mb"] = round(len(body) / 1e6, 1)
            del body

            elapsed = await raw_watch(session, url, "0", BIG)
            figures["watch_initial_events_per_s"] = round(BIG / elapsed)

            # One change per volume, written into the history; then replay it as a watcher would.
            await load(control, BIG, size="21474836480")
            server0, client0 = cpu_s(pid), time.process_time()
            elapsed = await raw_watch(session, url, rv, BIG)
            server_us = (cpu_s(pid) - server0) / BIG * 1e6
            figures["watch_events_per_s"] = round(BIG / elapsed)
            figures["watch_server_cpu_us_per_event"] = round(server_us, 2)
            figures["watch_server_capacity_events_per_s"] = round(1e6 / max(server_us, 0.01))
            figures["watch_client_cpu_us_per_event"] = round((time.process_time() - client0) / BIG * 1e6, 2)

            t0 = time.perf_counter()
            await asyncio.gather(*(raw_watch(session, url, rv, BIG) for _ in range(FANOUT)))
            figures["watch_fanout_events_per_s"] = round(FANOUT * BIG / (time.perf_counter() - t0))
            figures["watch_fanout_watchers"] = FANOUT

        seen = 0
        w = watch.Watch()
        t0 = time.perf_counter()
        async for _event in w.stream(
            crs.list_namespaced_custom_object, *LH, NS, "volumes", resource_version=rv
        ):
            seen += 1
            if seen >= K8S_WATCH_EVENTS:
                break
        figures["watch_k8s_asyncio_events_per_s"] = round(K8S_WATCH_EVENTS / (time.perf_counter() - t0))
        await w.close()
    finally:
        await api.close()
    return figures


async def main() -> None:
    figures: dict[str, Any] = {"volumes": BIG, "patches": PATCHES, "in_flight": IN_FLIGHT}
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        with emulator_process(Path(tmp), history=10_000) as (proc, url, kubeconfig):
            control = EmulatorControl(url)
            try:
                figures.update(await bench_patches(proc.pid, kubeconfig, control))
            finally:
                await control.close()
        with emulator_process(Path(tmp), history=3 * BIG) as (proc, url, kubeconfig):
            control = EmulatorControl(url)
            try:
                figures.update(await bench_big(proc.pid, url, kubeconfig, control))
            finally:
                await control.close()
    write_report(
        "sandbox",
        figures,
        {
            "patches_per_s": ">= 5000 (emulator capacity: patches per second of emulator CPU, "
            "driven by kubernetes-asyncio clients)",
            "watch_events_per_s": ">= 45000 (a watcher reading the emulator's watch stream)",
        },
    )


if __name__ == "__main__":
    uvloop.run(main())
