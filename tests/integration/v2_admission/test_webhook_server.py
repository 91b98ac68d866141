"""corral's webhook server as kube-apiserver meets it: a real process (`python -m corral_v2_admission`)
serving HTTPS with a certificate made by openssl, judging AdmissionReviews with the facts it reads
from the sandbox's Kubernetes API: allowed, denied with Longhorn's code and message, concurrent
manager creates serialised, bad input refused, an unreadable cluster left to the failurePolicy."""

from __future__ import annotations

import asyncio
import json
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from corral_sandbox.seeds import Seed, seed_from_dict
from tests.fixtures.processes import ServiceProcess, eventually, free_port, python_module
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.v2_admission import MANAGERS, UpgradeCRs, manager_body, set_upgrade_requested
from tests.integration.bus.test_nats_tls import self_signed

pytestmark = pytest.mark.integration

DURING = "during v2 data engine upgrade"


@pytest.fixture
def sandbox_seed() -> Seed:
    return seed_from_dict({"nodes": [{"name": f"node-{i}"} for i in (1, 2, 3)], "generate": {"volumes": 0}})


class Webhook:
    def __init__(self, url: str, health: str, tls: ssl.SSLContext, process: ServiceProcess) -> None:
        self.url, self.health, self.tls, self.process = url, health, tls, process
        self.session = aiohttp.ClientSession()

    async def post(self, body: bytes) -> tuple[int, str]:
        async with self.session.post(f"{self.url}/validate", data=body, ssl=self.tls) as answer:
            return answer.status, await answer.text()

    async def review(
        self,
        resource: str,
        operation: str,
        new: dict[str, Any] | None,
        old: dict[str, Any] | None = None,
        namespace: str = "longhorn-system",
        **extra: Any,
    ) -> dict[str, Any]:
        group = "longhorn.io" if resource == "volumes" else "corral.longhorn.io"
        uid = str(uuid.uuid4())
        request = {
            "uid": uid,
            "kind": {"group": group, "version": "v1", "kind": "X"},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "name": str(((new or old) or {}).get("metadata", {}).get("name", "")),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "test"},
            "object": new,
            "oldObject": old,
            "dryRun": False,
            **extra,
        }
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        status, text = await self.post(json.dumps(review).encode())
        assert status == 200, text
        answer = json.loads(text)
        assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
        response: dict[str, Any] = answer["response"]
        assert response["uid"] == uid
        return response

    async def get(self, path: str) -> tuple[int, str]:
        async with self.session.get(f"{self.health}{path}") as answer:
            return answer.status, await answer.text()


@pytest.fixture
async def webhook(sandbox: Sandbox, tmp_path: Path) -> AsyncIterator[Webhook]:
    cert, key = self_signed(tmp_path)
    port, health_port = free_port(), free_port()
    env = {
        "CORRAL_KUBECONFIG": str(sandbox.cluster.kubeconfig_path),
        "CORRAL_NAMESPACE": sandbox.namespace,
        "CORRAL_TLS_CERT_FILE": str(cert),
        "CORRAL_TLS_KEY_FILE": str(key),
        "CORRAL_WEBHOOK_HOST": "127.0.0.1",
        "CORRAL_WEBHOOK_PORT": str(port),
        "CORRAL_HEALTH_HOST": "127.0.0.1",
        "CORRAL_HEALTH_PORT": str(health_port),
        "CORRAL_RESERVATION_TTL_S": "600",
        "CORRAL_READ_TIMEOUT_S": "0.5",
    }
    process = ServiceProcess("v2-admission", python_module("corral_v2_admission"), env, tmp_path)
    await process.start()
    tls = ssl.create_default_context(cafile=str(cert))
    hook = Webhook(f"https://127.0.0.1:{port}", f"http://127.0.0.1:{health_port}", tls, process)
    try:

        async def ready() -> bool:
            assert process.running, process.output()
            try:
                status, _ = await hook.get("/readyz")
            except aiohttp.ClientError:
                return False
            return status == 200

        await eventually(ready, within=60, what="the webhook server ready")
        yield hook
    finally:
        await hook.session.close()
        await process.stop()


def denied(response: dict[str, Any]) -> tuple[int, str, str]:
    assert response["allowed"] is False, response
    status = response["status"]
    return status["code"], status["reason"], status["message"]


async def test_reviews_are_judged_with_the_cluster_s_facts(webhook: Webhook, sandbox: Sandbox) -> None:
    assert denied(await webhook.review(MANAGERS, "CREATE", manager_body("v1", engine="v1"))) == (
        422,
        "Invalid",
        "data engine v1 is not supported for data engine live upgrade",
    )
    crs = UpgradeCRs(sandbox)
    await crs.create(MANAGERS, manager_body("stored"))  # through the sandbox's own hooks
    in_progress = (400, "BadRequest", "another dataEngineUpgradeManager is in progress")
    assert denied(await webhook.review(MANAGERS, "CREATE", manager_body("second"))) == in_progress
    await crs.set_state(MANAGERS, "stored", "completed")
    assert (await webhook.review(MANAGERS, "CREATE", manager_body("third")))["allowed"] is True
    # "third" is not stored (no API server acted on the review), but it was admitted: it counts
    assert denied(await webhook.review(MANAGERS, "CREATE", manager_body("fourth"))) == in_progress

    old: dict[str, Any] = {
        "metadata": {"name": "vol-a"},
        "spec": {"dataEngine": "v2", "nodeID": "", "numberOfReplicas": 2},
        "status": {"ownerID": "node-2"},
    }
    attach = {**old, "spec": {**old["spec"], "nodeID": "node-1"}}
    assert (await webhook.review("volumes", "UPDATE", attach, old))["allowed"] is True
    await set_upgrade_requested(sandbox, "node-1", True)
    assert denied(await webhook.review("volumes", "UPDATE", attach, old)) == (
        422,
        "Invalid",
        f"volume vol-a is not allowed to attach to node node-1 {DURING}",
    )
    assert (await webhook.review("volumes", "UPDATE", old, attach))["allowed"] is True  # detach
    status_write = await webhook.review("volumes", "UPDATE", attach, old, subResource="status")
    assert status_write["allowed"] is True

    # concurrent creates, all reviewed before any is stored: exactly one admitted, as Longhorn's Lease
    # lock makes it (in another namespace, where nothing is active); a dry run reserves nothing
    dry = await webhook.review(MANAGERS, "CREATE", manager_body("dry"), namespace="other", dryRun=True)
    assert dry["allowed"] is True
    answers = await asyncio.gather(
        *(webhook.review(MANAGERS, "CREATE", manager_body(f"race-{i}"), namespace="other") for i in range(4))
    )
    assert sorted(a["allowed"] for a in answers) == [False, False, False, True]

    _, metrics = await webhook.get("/metrics")
    assert (
        'corral_v2_admission_reviews_total{operation="UPDATE",resource="volumes",result="denied"} 1.0'
        in metrics
    )
    assert await webhook.process.terminate() == 0


async def test_bad_input_and_an_unreadable_cluster(webhook: Webhook, sandbox: Sandbox) -> None:
    """Bad input is refused and the server keeps serving. When the API answers too slowly the review
    fails with HTTP 500 (kube-apiserver then applies the webhook's failurePolicy) instead of the
    server deciding blind; a review needing no facts is still judged."""
    for body in (
        b"not json",
        b"{}",
        json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(),
    ):
        status, text = await webhook.post(body)
        assert status == 400 and text.strip(), text
    weird = {"metadata": {"name": "odd"}, "spec": ["not", "a", "map"]}
    answer = await webhook.review("nodedataengineupgrades", "CREATE", weird)
    assert denied(answer)[2] == "nodeID is required"
    assert (await webhook.review(MANAGERS, "CREATE", manager_body("after")))["allowed"] is True
    sandbox.emulator.faults.latency_s = 3.0  # the server gives up after CORRAL_READ_TIMEOUT_S
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "operation": "CREATE",
            "resource": {"group": "corral.longhorn.io", "version": "v1alpha1", "resource": MANAGERS},
            "namespace": "longhorn-system",
            "name": "blind",
            "object": manager_body("blind"),
        },
    }
    status, text = await webhook.post(json.dumps(review).encode())
    assert status == 500 and "cannot read the cluster" in text
    missing = await webhook.review(
        "nodedataengineupgrades", "CREATE", {"metadata": {"name": "n"}, "spec": {}}
    )
    assert denied(missing)[2] == "nodeID is required"
    sandbox.emulator.faults.latency_s = 0.0
    seen = await webhook.review(MANAGERS, "CREATE", manager_body("seen"), namespace="elsewhere")
    assert seen["allowed"] is True
