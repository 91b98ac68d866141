"""`corral sandbox up --nodes 3 --volumes 20` as a user runs it: a separate process, a kubeconfig that
appears when the cluster is ready, a kubernetes-asyncio client listing the volumes, and a clean exit on
Ctrl-C (SIGINT)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
from kubernetes_asyncio import client

from corral_kube.client import api_client
from tests.fixtures.processes import eventually

CORRAL = Path(sys.executable).with_name("corral")
REAL_VOLUME = "pvc-1b1760aa-d44d-4f64-aed8-53fb965dcb75"


async def kubeconfig_written(process: asyncio.subprocess.Process, kubeconfig: Path) -> None:
    """Until `corral sandbox up` has written its kubeconfig (the cluster is seeded); fails with its
    stderr if it exits first. Generous: the machine is shared, and imports alone take seconds."""

    async def written() -> bool:
        assert process.returncode is None, (await process.stderr.read()).decode() if process.stderr else ""
        return kubeconfig.exists()  # noqa: ASYNC240 (one local stat per poll, as before)

    await eventually(written, within=120, what="the kubeconfig", interval=0.1)


async def test_sandbox_up_serves_a_seeded_cluster_and_stops_cleanly(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        str(CORRAL),
        "sandbox",
        "up",
        "--nodes",
        "3",
        "--volumes",
        "20",
        "--seed",
        "3",
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    head = ""  # the output read while the cluster runs
    try:
        await kubeconfig_written(process, kubeconfig)
        api = await api_client(str(kubeconfig))
        try:
            volumes = await client.CustomObjectsApi(api).list_namespaced_custom_object(
                "longhorn.io", "v1beta2", "longhorn-system", "volumes"
            )
            nodes = await client.CoreV1Api(api).list_node()
        finally:
            await api.close()
        assert len(volumes["items"]) == 20
        assert {v["status"]["state"] for v in volumes["items"]} <= {"attached", "detached"}
        assert len(nodes.items) == 3
        # The longhorn-manager REST API it announces answers for the same volumes.
        assert process.stdout is not None
        async with asyncio.timeout(60):
            while "READY" not in head:
                line = (await process.stdout.readline()).decode()
                assert line, f"output ended before READY: {head}"
                head += line
        manager = next(
            line.split(": ", 1)[1] for line in head.splitlines() if line.startswith("longhorn-manager: ")
        )
        name = volumes["items"][0]["metadata"]["name"]
        async with aiohttp.ClientSession() as session, session.get(f"{manager}/v1/volumes/{name}") as answer:
            assert answer.status == 200, await answer.text()
            assert (await answer.json())["id"] == name
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), 60)
    out = head + ((await process.stdout.read()).decode() if process.stdout else "")
    assert code == 0, out
    assert f"kubeconfig: {kubeconfig}" in out
    assert "stopping" in out


async def test_sandbox_up_takes_a_seed_file_of_real_objects(tmp_path: Path) -> None:
    """`--seed-file` naming a file of real objects (a corpus Volume, as its cluster printed it): the
    default cluster comes up with that volume in it as printed, status included."""
    source = Path(__file__).parents[2] / "data" / "corpus" / "Volume" / "homelab-v1101-rwo-detached.yaml"
    seed_file = tmp_path / "real.yaml"
    seed_file.write_text(source.read_text())
    kubeconfig = tmp_path / "kubeconfig"
    process = await asyncio.create_subprocess_exec(
        str(CORRAL),
        "sandbox",
        "up",
        "--seed-file",
        str(seed_file),
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=tmp_path,
    )
    try:
        await kubeconfig_written(process, kubeconfig)
        api = await api_client(str(kubeconfig))
        try:
            volume = await client.CustomObjectsApi(api).get_namespaced_custom_object(
                "longhorn.io",
                "v1beta2",
                "longhorn-system",
                "volumes",
                "pvc-1b1760aa-d44d-4f64-aed8-53fb965dcb75",
            )
        finally:
            await api.close()
        assert volume["spec"]["size"] == "21474836480"
        assert volume["spec"]["Standby"] is False
        workloads = volume["status"]["kubernetesStatus"]["workloadsStatus"]
        assert workloads[0]["podName"] == "storage-bench-longhorn-nvme-v2-run-001-xgtdf"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), 60)
    assert code == 0
