"""DZ-01, DZ-02/03, DZ-04 and DZ-06 (acceptance-scenarios.md §3.3): group-A settings (priority class, taint
toleration) through the whole stack — watcher → setting-sync and im-restart → actuator → the API
server, whose workloads and pods the simulator carries on. Every observation asserts the two
invariants of scenario.py, not only the end state."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client

from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.setting_sync.scenario import (
    CSI_DEPLOYMENTS,
    CSI_PLUGIN,
    NODES,
    POD_COMPONENTS,
    UNMANAGED,
    Observer,
    toleration_keys,
)
from tests.scenarios.setting_sync.volumes import attached, detach

pytestmark = pytest.mark.scenario
PRIORITY = "priority-class"
TOLERATION = "taint-toleration"
CLASS = "system-cluster-critical"


async def settled(sandbox: Sandbox) -> Observer:
    observer = Observer(sandbox)
    await observer.until(
        lambda: observer.rolled_out() and observer.im_pods_running(), what="a settled cluster"
    )
    return observer


async def refused(sandbox: Sandbox, name: str, value: str) -> str:
    with pytest.raises(client.ApiException) as answer:
        await sandbox.patch("settings", name, {"value": value})
    assert answer.value.status == 400
    return str(json.loads(str(answer.value.body))["message"])


def busy_instance_managers(observer: Observer) -> set[str]:
    return {
        im["metadata"]["name"]
        for im in observer.objects("longhorn.io", "instancemanagers")
        if (im.get("status") or {}).get("instanceEngines") or (im.get("status") or {}).get("instanceReplicas")
    }


def settled_on(observer: Observer, name: str, value: str) -> bool:
    return (
        observer.applied(name)
        and not observer.lagging(name, value)
        and observer.rolled_out()
        and observer.im_pods_running()
    )


async def test_dz_01_priority_class_with_no_volume_attached(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    unmanaged = observer.uids(UNMANAGED)
    before = {p["metadata"]["uid"] for c in POD_COMPONENTS for p in observer.pods(c)}
    assert before, "no component pods to recreate"
    await observer.set_setting(PRIORITY, CLASS)
    await observer.until(lambda: settled_on(observer, PRIORITY, CLASS), what="priority class applied")
    for component in POD_COMPONENTS:
        for pod in observer.pods(component):
            assert pod["spec"].get("priorityClassName") == CLASS, pod["metadata"]["name"]
            assert pod["metadata"]["uid"] not in before, f"{pod['metadata']['name']} was not recreated"
    for workload in (CSI_PLUGIN, *CSI_DEPLOYMENTS):
        pods = observer.workload_pods(workload)
        assert pods and all(p["spec"].get("priorityClassName") == CLASS for p in pods), workload
        assert all(p["spec"].get("priority") == 2000000000 for p in pods)
    engine_images = [
        d["metadata"]["name"]
        for d in observer.objects("apps", "daemonsets")
        if d["metadata"]["name"].startswith("engine-image-")
    ]
    assert engine_images, "no engine-image DaemonSet"
    for name in engine_images:  # as Longhorn's setting controller does (issue 24)
        ds = observer.get("apps", "daemonsets", name)
        assert ds is not None and ds["spec"]["template"]["spec"].get("priorityClassName") == CLASS, name
        pods = observer.workload_pods(name)
        assert pods and all(p["spec"].get("priorityClassName") == CLASS for p in pods), name
    assert observer.uids(UNMANAGED) == unmanaged, "an unmanaged workload restarted"
    for unmanaged_name in UNMANAGED:
        plural = "daemonsets" if unmanaged_name == "longhorn-manager" else "deployments"
        held = observer.get("apps", plural, unmanaged_name)
        assert held is not None and held["metadata"]["generation"] == 1, f"{unmanaged_name} was rolled"
    assert observer.claims > 0


async def dz_02(sandbox: Sandbox) -> tuple[Observer, dict[str, str]]:
    """DZ-02: one attached 1-replica volume; priority class set: pending, idle IM pods restarted with it,
    the busy one untouched. Returns the observer and the busy IM pods' uids."""
    observer = await settled(sandbox)
    await attached(sandbox, "vol-1")
    busy = busy_instance_managers(observer)
    assert busy
    pods = observer.im_pods()
    kept = {im: pods[im]["metadata"]["uid"] for im in busy}
    idle_before = {n: p["metadata"]["uid"] for n, p in pods.items() if n not in busy}
    await observer.set_setting(PRIORITY, CLASS)

    def idle_restarted() -> bool:
        now = observer.im_pods()
        return not observer.applied(PRIORITY) and all(
            n in now
            and now[n]["metadata"]["uid"] != uid
            and now[n]["spec"].get("priorityClassName") == CLASS
            and (now[n].get("status") or {}).get("phase") == "Running"
            for n, uid in idle_before.items()
        )

    await observer.until(idle_restarted, what="applied=false, idle IM pods recreated with the class")

    def synced_false() -> bool:
        for im in observer.objects("longhorn.io", "instancemanagers"):
            if im["metadata"]["name"] in busy:
                conditions = (im.get("status") or {}).get("conditions") or []
                found = [c for c in conditions if c.get("type") == "SettingSynced"]
                if not found or found[0]["status"] != "False" or PRIORITY not in found[0].get("message", ""):
                    return False
        return True

    await observer.until(synced_false, what="the busy IM reporting SettingSynced=False for priority-class")

    def busy_kept() -> bool:
        now = observer.im_pods()
        volume = observer.get("longhorn.io", "volumes", "vol-1") or {}
        healthy = (volume.get("status") or {}).get("robustness") == "healthy"
        return (
            healthy
            and not observer.applied(PRIORITY)
            and all(now[im]["metadata"]["uid"] == uid for im, uid in kept.items())
        )

    await observer.holds(busy_kept, 1.0, what="busy IM pod kept, volume healthy, applied=false")
    for im in kept:
        pod = observer.im_pods()[im]
        assert all(
            s.get("restartCount", 0) == 0 for s in (pod.get("status") or {}).get("containerStatuses") or []
        )
    return observer, kept


async def test_dz_02_03_pending_while_attached_then_applied_on_detach(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    """DZ-02, then its continuation DZ-03 (one stack for both: DZ-03 starts where DZ-02 ends)."""
    observer, kept = await dz_02(sandbox)
    await detach(sandbox, "vol-1")
    await observer.until(lambda: settled_on(observer, PRIORITY, CLASS), what="applied after the detach")
    pods = observer.im_pods()
    assert all(pods[im]["metadata"]["uid"] != uid for im, uid in kept.items()), "busy IM pod not recreated"
    for workload in (CSI_PLUGIN, *CSI_DEPLOYMENTS):
        assert all(p["spec"].get("priorityClassName") == CLASS for p in observer.workload_pods(workload))
    # re-applying the same value is harmless: it stays applied, nothing restarts again
    uids = {p["metadata"]["uid"] for c in POD_COMPONENTS for p in observer.pods(c)}
    await observer.set_setting(PRIORITY, CLASS)
    await observer.holds(
        lambda: (
            observer.applied(PRIORITY)
            and {p["metadata"]["uid"] for c in POD_COMPONENTS for p in observer.pods(c)} == uids
        ),
        1.0,
        what="re-applying restarts nothing",
    )
    assert observer.claims > 0


EXPECTED = {("key1", "Equal", "value1", "NoSchedule"), ("key2", "Exists", "", "NoExecute")}


async def test_dz_04_toleration_lifecycle(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    message = await refused(sandbox, TOLERATION, "key1=value1:NoSchedule; key2:InvalidEffect")
    assert "invalid effect" in message
    unmanaged = observer.uids(UNMANAGED)
    await attached(sandbox, "vol-1")
    value = "key1=value1:NoSchedule; key2:NoExecute"
    await observer.set_setting(TOLERATION, value)  # accepted while attached
    await observer.until(lambda: not observer.applied(TOLERATION), what="applied=false while attached")
    await observer.holds(lambda: not observer.applied(TOLERATION), 0.5, what="pending while attached")
    await detach(sandbox, "vol-1")
    await observer.until(lambda: settled_on(observer, TOLERATION, value), what="tolerations applied")
    plugin = observer.get("apps", "daemonsets", CSI_PLUGIN)
    assert plugin is not None and plugin["status"]["updatedNumberScheduled"] == len(NODES)
    managed = [
        *(p for c in POD_COMPONENTS for p in observer.pods(c)),
        *(p for w in (CSI_PLUGIN, *CSI_DEPLOYMENTS) for p in observer.workload_pods(w)),
    ]
    for pod in managed:
        assert (pod.get("status") or {}).get("phase") == "Running", pod["metadata"]["name"]
        assert toleration_keys(pod) == EXPECTED, pod["metadata"]["name"]
    for name in UNMANAGED:
        assert all(not toleration_keys(p) for p in observer.workload_pods(name)), name
    assert observer.uids(UNMANAGED) == unmanaged, "an unmanaged component restarted"
    # reattach works; clearing the value removes the tolerations again
    await sandbox.patch("volumes", "vol-1", {"spec": {"nodeID": "node-2"}})
    await sandbox.wait_volume(
        "vol-1", lambda v: (v.get("status") or {}).get("state") == "attached", within=30, what="reattached"
    )
    await detach(sandbox, "vol-1")
    await observer.set_setting(TOLERATION, "")
    await observer.until(lambda: settled_on(observer, TOLERATION, ""), what="tolerations cleared")
    for pod in (p for c in POD_COMPONENTS for p in observer.pods(c)):
        assert toleration_keys(pod) == set(), pod["metadata"]["name"]
    assert observer.claims > 0


async def test_dz_06_priority_class_validation_and_unset(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    message = await refused(sandbox, PRIORITY, "no-such-class")
    assert "failed to get priority class" in message
    await observer.set_setting(PRIORITY, CLASS)
    await observer.until(lambda: settled_on(observer, PRIORITY, CLASS), what="class applied")
    await observer.set_setting(PRIORITY, "")
    await observer.until(lambda: settled_on(observer, PRIORITY, ""), what="class unset")
    pods = [
        *(p for c in POD_COMPONENTS for p in observer.pods(c)),
        *(p for w in (CSI_PLUGIN, *CSI_DEPLOYMENTS) for p in observer.workload_pods(w)),
    ]
    assert pods
    for pod in pods:
        assert not pod["spec"].get("priorityClassName"), pod["metadata"]["name"]
        assert pod["spec"].get("priority", 0) == 0, pod["metadata"]["name"]
