"""DZ-08, DZ-09, DZ-16, DZ-17 (acceptance-scenarios.md §3.3): the storage network (group A), the RWX
endpoint network (group B, gated only by non-migratable RWX volumes), a Longhorn upgrade with the
storage network set, and CSI plugin restarts under a migratable RWX workload. Invariants of
scenario.py at every observation."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from corral_sandbox.simulator import LonghornRelease, roll_out
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.setting_sync.scenario import CSI_PLUGIN, NODES, NS, Observer, network_status
from tests.scenarios.setting_sync.volumes import attached, detach

pytestmark = pytest.mark.scenario
STORAGE = "storage-network"
ENDPOINT = "endpoint-network-for-rwx-volume"
NAD = "kube-system/demo-192-168-0-0"
NETWORKS = "k8s.v1.cni.cncf.io/networks"


async def settled(sandbox: Sandbox) -> Observer:
    observer = Observer(sandbox)
    await observer.until(
        lambda: observer.rolled_out() and observer.im_pods_running(), what="a settled cluster"
    )
    return observer


def interfaces(pod: dict[str, Any]) -> set[str]:
    return {str(n.get("interface")) for n in network_status(pod)}


async def workload(sandbox: Sandbox, name: str = "app", replicas: int = 2) -> None:
    """A user's Deployment (no Longhorn label) standing for pods that use an RWX volume."""
    body: Any = {
        "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
    }
    await client.AppsV1Api(sandbox.api).create_namespaced_deployment(NS, body)


async def test_dz_08_storage_network_waits_for_the_detach(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    # a backing image on every node, so that every node runs a backing-image manager
    await attached(sandbox, "vol-1", replicas=len(NODES), backing_image="bi-1")
    await observer.until(
        lambda: len(observer.pods("backing-image-manager")) == len(NODES),
        what="a backing-image manager on every node using the backing image",
    )
    bims = {p["metadata"]["name"]: p["metadata"]["uid"] for p in observer.pods("backing-image-manager")}
    await observer.set_setting(STORAGE, NAD)
    await observer.until(lambda: not observer.applied(STORAGE), what="applied=false while attached")

    def bims_kept() -> bool:
        now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in observer.pods("backing-image-manager")}
        return now == bims and not observer.applied(STORAGE)

    await observer.holds(bims_kept, 1.0, what="no backing-image-manager pod deleted while attached")
    await detach(sandbox, "vol-1")

    def applied() -> bool:
        pods = [*observer.im_pods().values(), *observer.pods("backing-image-manager")]
        return (
            observer.applied(STORAGE)
            and not observer.lagging(STORAGE, NAD)
            and observer.im_pods_running()
            and len(pods) == 2 * len(NODES)
            and all((p.get("status") or {}).get("phase") == "Running" for p in pods)
        )

    await observer.until(applied, what="storage network applied after the detach")
    for pod in observer.pods("backing-image-manager"):
        assert pod["metadata"]["uid"] not in bims.values()
        assert '"interface": "lhnet1"' in pod["metadata"]["annotations"][NETWORKS]
        status = network_status(pod)
        assert len(status) == 2, "the default network and the storage network"
        [lhnet1] = [n for n in status if n["interface"] == "lhnet1"]
        assert lhnet1["name"] == NAD and lhnet1["ips"][0].startswith("192.168.")
    for pod in observer.im_pods().values():
        assert '"interface": "lhnet1"' in pod["metadata"]["annotations"][NETWORKS]
    assert observer.claims > 0


async def test_dz_09_endpoint_network_gated_only_by_rwx(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    await attached(sandbox, "rwx-migratable", access_mode="rwx", migratable=True)
    await attached(sandbox, "rwo", "node-2")
    assert observer.pods("share-manager") == [], "a migratable RWX volume has no share manager"
    await observer.set_setting(ENDPOINT, NAD)

    def applied() -> bool:
        return observer.applied(ENDPOINT) and not observer.lagging(ENDPOINT, NAD) and observer.rolled_out()

    await observer.until(applied, what="the endpoint network applied with RWO and migratable RWX attached")
    for pod in observer.workload_pods(CSI_PLUGIN):
        assert '"interface": "lhnet2"' in pod["metadata"]["annotations"][NETWORKS]
        assert "lhnet2" in interfaces(pod)
    # a new RWX workload's share manager is on the endpoint network
    await attached(sandbox, "rwx-new", "node-3", access_mode="rwx")

    def share_manager_on_lhnet2() -> bool:
        pods = observer.pods("share-manager")
        return len(pods) == 1 and "lhnet2" in interfaces(pods[0])

    await observer.until(share_manager_on_lhnet2, what="the new share manager on lhnet2")
    assert observer.claims > 0


async def test_dz_16_upgrade_with_storage_network_set(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    await observer.set_setting(STORAGE, NAD)
    await observer.until(
        lambda: (
            observer.applied(STORAGE) and not observer.lagging(STORAGE, NAD) and observer.im_pods_running()
        ),
        what="storage network applied",
    )
    await attached(sandbox, "rwx-1", access_mode="rwx", migratable=True)
    await workload(sandbox)
    await observer.until(
        lambda: observer.rolled_out() and len(observer.workload_pods("app")) == 2, what="app up"
    )
    app = {p["metadata"]["uid"] for p in observer.workload_pods("app")}
    release = LonghornRelease(
        version="v1.10.1",
        engine_image="longhornio/longhorn-engine:v1.10.1",
        instance_manager_image="longhornio/longhorn-instance-manager:v1.10.1",
    )
    await roll_out(sandbox.simulator, release)

    def upgraded() -> bool:
        ims = observer.objects("longhorn.io", "instancemanagers")
        new = [im for im in ims if im["spec"]["image"] == release.instance_manager_image]
        return (
            len(new) == len(NODES)
            and observer.im_pods_running(len(observer.im_pods()))
            and observer.rolled_out()
        )

    await observer.until(upgraded, what="the new instance managers running")
    for pod in observer.workload_pods(CSI_PLUGIN):
        assert NETWORKS not in (pod["metadata"].get("annotations") or {}), "CSI plugin on the storage network"
    for pod in observer.im_pods().values():
        assert '"interface": "lhnet1"' in pod["metadata"]["annotations"][NETWORKS]
    await observer.holds(
        lambda: {p["metadata"]["uid"] for p in observer.workload_pods("app")} == app,
        1.0,
        what="the RWX workload's pods not restarted",
    )


async def test_dz_17_csi_plugin_restart_leaves_rwx_workloads_alone(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    observer = await settled(sandbox)
    await attached(sandbox, "rwx-1", access_mode="rwx", migratable=True)
    await workload(sandbox)
    await observer.until(
        lambda: observer.rolled_out() and len(observer.workload_pods("app")) == 2, what="app up"
    )
    app = {p["metadata"]["uid"] for p in observer.workload_pods("app")}
    plugin = {p["metadata"]["uid"] for p in observer.workload_pods(CSI_PLUGIN)}
    core = client.CoreV1Api(sandbox.api)
    for pod in observer.workload_pods(CSI_PLUGIN):
        await core.delete_namespaced_pod(pod["metadata"]["name"], NS)

    def replaced() -> bool:
        pods = observer.workload_pods(CSI_PLUGIN)
        return (
            observer.rolled_out()
            and len(pods) == len(NODES)
            and not plugin & {p["metadata"]["uid"] for p in pods}
        )

    await observer.until(replaced, what="the CSI plugin pods recreated")
    checks = 0

    def unchanged() -> bool:
        nonlocal checks
        checks += 1
        return {p["metadata"]["uid"] for p in observer.workload_pods("app")} == app

    await observer.holds(unchanged, 2.0, what="workload pod UIDs unchanged")
    assert checks >= 60, f"only {checks} checks"
