"""How fast corral's v2 admission webhook answers kube-apiserver.

The webhook server runs as in a cluster (`python -m corral_v2_admission`, its own process, HTTPS with
an openssl-made certificate) and reads the sandbox's Kubernetes API (20 Longhorn nodes) through
kubernetes-asyncio. A client sends AdmissionReviews `CONCURRENCY` at a time, three kinds:

* `v1_volume`: a v1 volume update (what the chart's matchConditions keep away; the rules read nothing);
* `v2_attach`: a v2 volume attach (one list of the Longhorn nodes, refused: the node is upgrading);
* `manager_create`: a DataEngineUpgradeManager create (the managers and the nodes, judged one at a
  time under the server's lock; refused: another is in progress).

Figures per kind: `p50_ms`, `p99_ms`, `max_ms` and `reviews_per_s`; and `rules_per_s`, the pure rules
alone in this process. The floor they answer: kube-apiserver gives a webhook `timeoutSeconds` (the
chart: 10 s) per call. Writes bench/results/v2_admission.json. Measures; never asserts.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402

from bench.report import scaled, write_report  # noqa: E402
from corral_kube.client import api_client  # noqa: E402
from corral_sandbox.cluster import SandboxCluster  # noqa: E402
from corral_sandbox.seeds import default_seed, resized  # noqa: E402
from corral_v2admission import VOLUMES, KnownFacts, admit  # noqa: E402
from tests.fixtures.processes import ServiceProcess, free_port, python_module  # noqa: E402
from tests.fixtures.sandbox import Sandbox, fast_config  # noqa: E402
from tests.fixtures.v2_admission import MANAGERS, UpgradeCRs, manager_body, set_upgrade_requested  # noqa: E402
from tests.integration.bus.test_nats_tls import self_signed  # noqa: E402

NODES = 20
REVIEWS = scaled(600, 50)
CONCURRENCY = 8
RULE_CALLS = scaled(200_000, 5_000)


def review(resource: str, operation: str, new: dict[str, Any], old: dict[str, Any] | None) -> bytes:
    group = "longhorn.io" if resource == VOLUMES else "corral.longhorn.io"
    request = {
        "uid": str(uuid.uuid4()),
        "operation": operation,
        "resource": {"group": group, "version": "v1", "resource": resource},
        "namespace": "longhorn-system",
        "name": new["metadata"]["name"],
        "object": new,
        "oldObject": old,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def volume(engine: str, node: str) -> dict[str, Any]:
    spec = {"dataEngine": engine, "nodeID": node, "numberOfReplicas": 3, "image": "im:1"}
    return {"metadata": {"name": "pvc-a"}, "spec": spec, "status": {"ownerID": "node-2"}}


KINDS = {
    "v1_volume": review(VOLUMES, "UPDATE", volume("v1", "node-1"), volume("v1", "")),
    "v2_attach": review(VOLUMES, "UPDATE", volume("v2", "node-1"), volume("v2", "")),
    "manager_create": review(MANAGERS, "CREATE", manager_body("second"), None),
}


async def measure(
    session: aiohttp.ClientSession, url: str, tls: ssl.SSLContext, body: bytes
) -> dict[str, float]:
    latencies: list[float] = []
    queue = list(range(REVIEWS))

    async def worker() -> None:
        while queue:
            queue.pop()
            started = time.perf_counter()
            async with session.post(url, data=body, ssl=tls) as answer:
                await answer.read()
                assert answer.status == 200
            latencies.append(time.perf_counter() - started)

    wall = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    wall = time.perf_counter() - wall
    latencies.sort()
    return {
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 2),
        "max_ms": round(latencies[-1] * 1000, 2),
        "reviews_per_s": round(len(latencies) / wall, 1),
    }


def rules_per_s() -> float:
    facts = KnownFacts(
        upgrading={f"node-{i}": i == 1 for i in range(1, NODES + 1)}, instance_manager_image="im:2"
    )
    old, new = volume("v2", ""), volume("v2", "node-1")
    started = time.perf_counter()
    for _ in range(RULE_CALLS):
        admit(VOLUMES, "UPDATE", old, new, facts)
    return round(RULE_CALLS / (time.perf_counter() - started), 0)


async def run() -> dict[str, Any]:
    load_before = os.getloadavg()
    seed = resized(default_seed(), nodes=NODES, volumes=0)
    with tempfile.TemporaryDirectory() as tmp:
        cert, key = self_signed(Path(tmp))
        async with SandboxCluster(seed, sim_config=fast_config(), background=False) as cluster:
            api = await api_client(str(cluster.kubeconfig_path))
            sandbox = Sandbox(cluster, api, seed.namespace)
            await UpgradeCRs(sandbox).create(MANAGERS, manager_body("first"))
            await set_upgrade_requested(sandbox, "node-1", True)
            port, health = free_port(), free_port()
            env = {
                "CORRAL_KUBECONFIG": str(cluster.kubeconfig_path),
                "CORRAL_TLS_CERT_FILE": str(cert),
                "CORRAL_TLS_KEY_FILE": str(key),
                "CORRAL_WEBHOOK_HOST": "127.0.0.1",
                "CORRAL_WEBHOOK_PORT": str(port),
                "CORRAL_HEALTH_HOST": "127.0.0.1",
                "CORRAL_HEALTH_PORT": str(health),
                "CORRAL_LOG_LEVEL": "warning",
            }
            server = ServiceProcess("v2-admission", python_module("corral_v2_admission"), env, Path(tmp))
            await server.start()
            tls = ssl.create_default_context(cafile=str(cert))
            figures: dict[str, Any] = {
                "nodes": NODES,
                "reviews_per_kind": REVIEWS,
                "concurrency": CONCURRENCY,
            }
            try:
                async with aiohttp.ClientSession() as session:
                    for _ in range(600):
                        try:
                            async with session.get(f"http://127.0.0.1:{health}/readyz") as answer:
                                if answer.status == 200:
                                    break
                        except aiohttp.ClientError:
                            pass
                        await asyncio.sleep(0.1)
                    for kind, body in KINDS.items():
                        figures[kind] = await measure(
                            session, f"https://127.0.0.1:{port}/validate", tls, body
                        )
            finally:
                await server.stop()
                await api.close()
    figures["rules_per_s"] = rules_per_s()
    figures["load_average_before"] = load_before
    return figures


def main() -> None:
    figures = asyncio.run(run())
    write_report(
        "v2_admission",
        figures,
        floors={"p99_ms": "far below the webhook's timeoutSeconds (10 s in the chart) for every kind"},
    )


if __name__ == "__main__":
    main()
