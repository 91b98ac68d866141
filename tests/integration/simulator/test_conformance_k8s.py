"""Simulator conformance SC-13..SC-19 (SIM-K8S): the Kubernetes side the danger-zone scenarios rest on,
checked through kubernetes-asyncio against the sandbox, so a DZ scenario that fails points at
corral and not at the sandbox.

* SC-13 Longhorn's workloads exist (managed ones labelled, unmanaged ones not), and a changed pod
  template rolls the pods, with `updatedNumberScheduled`/`updatedReplicas`/`observedGeneration`
  reporting it as the real controllers do (and `metadata.generation` bumped by the API server).
* SC-14 The scheduler honours node selectors and taints: a pod that fits no node stays Pending
  with `PodScheduled=False`; a toleration lets it on.
* SC-15 PriorityClasses: the built-in ones exist; a pod naming a missing class is refused, a
  Deployment naming one reports ReplicaFailure; a pod gets the class's priority.
* SC-16 Longhorn's setting webhooks: normalisation, Longhorn's validation messages, the
  data-engine toggle, the read-only annotation, no deletes; the emulator's back door bypasses them.
* SC-17 Share-manager pods for RWX volumes (none for migratable ones), a backing-image manager on
  each node that uses a backing image (none before), both recreated with the current settings
  after a delete.
* SC-18 VolumeAttachment tickets follow attachment and migration.
* SC-19 `longhorn-default-setting` changes reach the Setting values; refused values are skipped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from corral_sandbox.simulator.default_settings import CONFIGMAP, KEY
from corral_sandbox.simulator.setting_webhooks import FROM_LONGHORN
from corral_sandbox.simulator.volume_attachments import ticket_id
from tests.fixtures.sandbox import Sandbox

pytestmark = pytest.mark.integration
NS = "longhorn-system"
MANAGED = ("longhorn-csi-plugin", "csi-attacher", "csi-provisioner", "csi-resizer", "csi-snapshotter")
UNMANAGED = ("longhorn-manager", "longhorn-ui", "longhorn-driver-deployer")


def pods(sandbox: Sandbox, selector: str = "") -> list[dict[str, Any]]:
    return sandbox.emulator.list("", "pods", NS, label_selector=selector)


def owned_by(sandbox: Sandbox, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods(sandbox)
        if any(r.get("name") == name for r in p["metadata"].get("ownerReferences") or [])
        and not p["metadata"].get("deletionTimestamp")
    ]


def workload(sandbox: Sandbox, plural: str, name: str) -> dict[str, Any]:
    found = sandbox.emulator.get("apps", plural, NS, name)
    assert found is not None, f"{plural} {name} missing"
    return found


async def rolled_out(sandbox: Sandbox, plural: str, name: str) -> bool:
    obj = workload(sandbox, plural, name)
    status = obj.get("status") or {}
    if status.get("observedGeneration") != obj["metadata"].get("generation"):
        return False
    if plural == "daemonsets":
        want = status.get("desiredNumberScheduled")
        return bool(status.get("updatedNumberScheduled") == want == status.get("numberReady"))
    want = obj["spec"].get("replicas", 1)
    return bool(status.get("updatedReplicas") == want == status.get("readyReplicas"))


async def wait_rolled_out(sandbox: Sandbox, plural: str, name: str) -> None:
    await sandbox.wait_for(lambda: rolled_out(sandbox, plural, name), within=20, what=f"{name} rolled out")


async def setting_refused(sandbox: Sandbox, name: str, value: str) -> str:
    with pytest.raises(client.ApiException) as refused:
        await sandbox.patch("settings", name, {"value": value})
    assert refused.value.status == 400
    return str(json.loads(str(refused.value.body))["message"])


async def test_sc13_workloads_exist_and_roll_on_a_template_change(sandbox: Sandbox) -> None:
    for name in (*MANAGED, *UNMANAGED):
        plural = "daemonsets" if name in ("longhorn-csi-plugin", "longhorn-manager") else "deployments"
        await wait_rolled_out(sandbox, plural, name)
        labels = workload(sandbox, plural, name)["metadata"].get("labels") or {}
        assert (labels.get("longhorn.io/managed-by") == "longhorn-manager") == (name in MANAGED), name
    [ei_ds] = [
        ds["metadata"]["name"]
        for ds in sandbox.emulator.list("apps", "daemonsets", NS)
        if ds["metadata"]["name"].startswith("engine-image-ei-")
    ]
    await wait_rolled_out(sandbox, "daemonsets", ei_ds)
    assert len(owned_by(sandbox, "longhorn-csi-plugin")) == 3
    assert len(owned_by(sandbox, "csi-attacher")) == 3
    before = {p["metadata"]["uid"] for p in owned_by(sandbox, "longhorn-csi-plugin")}
    manager_before = {p["metadata"]["uid"] for p in owned_by(sandbox, "longhorn-manager")}
    apps = client.AppsV1Api(sandbox.api)
    patch = {"spec": {"template": {"spec": {"priorityClassName": "system-node-critical"}}}}
    await apps.patch_namespaced_daemon_set("longhorn-csi-plugin", NS, patch)
    await apps.patch_namespaced_deployment("csi-attacher", NS, patch)
    assert workload(sandbox, "daemonsets", "longhorn-csi-plugin")["metadata"]["generation"] == 2
    await wait_rolled_out(sandbox, "daemonsets", "longhorn-csi-plugin")
    await wait_rolled_out(sandbox, "deployments", "csi-attacher")
    after = owned_by(sandbox, "longhorn-csi-plugin")
    assert len(after) == 3 and not before & {p["metadata"]["uid"] for p in after}
    for pod in [*after, *owned_by(sandbox, "csi-attacher")]:
        assert pod["spec"]["priorityClassName"] == "system-node-critical"
        assert pod["spec"]["priority"] == 2000001000
    assert {p["metadata"]["uid"] for p in owned_by(sandbox, "longhorn-manager")} == manager_before


async def test_sc14_a_pod_that_fits_no_node_stays_pending(sandbox: Sandbox) -> None:
    apps = client.AppsV1Api(sandbox.api)
    await wait_rolled_out(sandbox, "deployments", "csi-resizer")
    selector = {"spec": {"template": {"spec": {"nodeSelector": {"disktype": "ssd"}}}}}
    await apps.patch_namespaced_deployment("csi-resizer", NS, selector)

    async def pending() -> list[dict[str, Any]]:
        found = [p for p in owned_by(sandbox, "csi-resizer") if p["spec"].get("nodeSelector")]
        stuck = [
            p
            for p in found
            if (p.get("status") or {}).get("phase") == "Pending"
            and any(
                c["type"] == "PodScheduled" and c["status"] == "False"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ]
        return stuck if len(stuck) == 3 else []

    stuck = await sandbox.wait_for(pending, within=20, what="three unschedulable csi-resizer pods")
    [condition] = stuck[0]["status"]["conditions"]
    assert condition["reason"] == "Unschedulable"
    assert (
        condition["message"]
        == "0/3 nodes are available: 3 node(s) didn't match Pod's node affinity/selector."
    )
    # a NoSchedule taint on the one labelled node keeps the pods off until they tolerate it
    core = client.CoreV1Api(sandbox.api)
    taint = {"key": "dedicated", "value": "storage", "effect": "NoSchedule"}
    await core.patch_node(
        "node-2", {"metadata": {"labels": {"disktype": "ssd"}}, "spec": {"taints": [taint]}}
    )

    async def tainted() -> bool:
        return all(
            "untolerated taint {dedicated: storage}" in c.get("message", "")
            for p in owned_by(sandbox, "csi-resizer")
            for c in (p.get("status") or {}).get("conditions") or []
        )

    await sandbox.wait_for(tainted, within=20, what="the taint named in the scheduler's message")
    toleration = {"key": "dedicated", "operator": "Equal", "value": "storage", "effect": "NoSchedule"}
    await apps.patch_namespaced_deployment(
        "csi-resizer", NS, {"spec": {"template": {"spec": {"tolerations": [toleration]}}}}
    )
    await wait_rolled_out(sandbox, "deployments", "csi-resizer")
    assert {p["spec"]["nodeName"] for p in owned_by(sandbox, "csi-resizer")} == {"node-2"}
    # a DaemonSet runs only where its selector matches and its tolerations allow: none on the
    # tainted node-2 alone, then one daemon pod there once it tolerates the taint
    template: dict[str, Any] = {"spec": {"nodeSelector": {"disktype": "ssd"}}}
    await apps.patch_namespaced_daemon_set("longhorn-csi-plugin", NS, {"spec": {"template": template}})
    await wait_rolled_out(sandbox, "daemonsets", "longhorn-csi-plugin")
    assert workload(sandbox, "daemonsets", "longhorn-csi-plugin")["status"]["desiredNumberScheduled"] == 0
    assert owned_by(sandbox, "longhorn-csi-plugin") == []
    template["spec"]["tolerations"] = [toleration]
    await apps.patch_namespaced_daemon_set("longhorn-csi-plugin", NS, {"spec": {"template": template}})
    await wait_rolled_out(sandbox, "daemonsets", "longhorn-csi-plugin")
    assert workload(sandbox, "daemonsets", "longhorn-csi-plugin")["status"]["desiredNumberScheduled"] == 1
    assert [p["spec"]["nodeName"] for p in owned_by(sandbox, "longhorn-csi-plugin")] == ["node-2"]


async def test_sc15_priority_classes(sandbox: Sandbox) -> None:
    names = {p["metadata"]["name"] for p in sandbox.emulator.list("scheduling.k8s.io", "priorityclasses")}
    assert {"system-cluster-critical", "system-node-critical"} <= names
    core = client.CoreV1Api(sandbox.api)
    body: Any = {
        "metadata": {"name": "stray"},
        "spec": {"priorityClassName": "missing", "containers": [{"name": "c", "image": "x"}]},
    }
    with pytest.raises(client.ApiException) as refused:
        await core.create_namespaced_pod(NS, body)
    assert refused.value.status == 403
    assert "no PriorityClass with name missing was found" in str(refused.value.body)
    apps = client.AppsV1Api(sandbox.api)
    await wait_rolled_out(sandbox, "deployments", "csi-snapshotter")
    patch = {"spec": {"template": {"spec": {"priorityClassName": "missing"}}}}
    await apps.patch_namespaced_deployment("csi-snapshotter", NS, patch)

    async def failing() -> str:
        conditions = (
            workload(sandbox, "deployments", "csi-snapshotter").get("status", {}).get("conditions") or []
        )
        return next((c["message"] for c in conditions if c["type"] == "ReplicaFailure"), "")

    message = await sandbox.wait_for(failing, within=20, what="ReplicaFailure")
    assert "no PriorityClass with name missing was found" in message

    async def no_pods() -> bool:
        return owned_by(sandbox, "csi-snapshotter") == []

    await sandbox.wait_for(no_pods, within=20, what="the old pods gone and no new one")
    scheduling = client.SchedulingV1Api(sandbox.api)
    await scheduling.create_priority_class(
        client.V1PriorityClass(metadata=client.V1ObjectMeta(name="missing"), value=1000)
    )
    await wait_rolled_out(sandbox, "deployments", "csi-snapshotter")
    assert {p["spec"]["priority"] for p in owned_by(sandbox, "csi-snapshotter")} == {1000}


async def test_sc16_setting_webhooks(sandbox: Sandbox) -> None:
    await sandbox.set_setting("guaranteed-instance-manager-cpu", "20")
    stored = await sandbox.get("settings", "guaranteed-instance-manager-cpu")
    assert stored["value"] == '{"v1":"20","v2":"20"}'
    await sandbox.set_setting("data-engine-cpu-mask", "1-3,5")
    assert (await sandbox.get("settings", "data-engine-cpu-mask"))["value"] == '{"v2":"0x2e"}'
    message = await setting_refused(sandbox, "taint-toleration", "key1=value1:NoSchedule; key2:InvalidEffect")
    assert message.startswith('admission webhook "validator.longhorn.io" denied the request: ')
    assert "invalid effect: InvalidEffect" in message
    message = await setting_refused(sandbox, "priority-class", "no-such-class")
    assert "failed to get priority class no-such-class" in message
    message = await setting_refused(sandbox, "guaranteed-instance-manager-cpu", "41")
    assert "should be less than or equal to 40" in message
    # the v2 toggle: enabling needs hugepages on every node (none here)
    message = await setting_refused(sandbox, "v2-data-engine", "true")
    assert "failed to get hugepages-2Mi capacity for node node-1" in message
    # disabling v1 with a v1 engine running is refused; after the detach it is accepted
    await sandbox.create_volume("vol-1", replicas=1, node="node-1")
    await sandbox.wait_volume("vol-1", lambda v: v.get("status", {}).get("state") == "attached", within=20)

    async def engine_in_im() -> bool:
        ims = await sandbox.list("instancemanagers")
        return any((im.get("status") or {}).get("instanceEngines") for im in ims)

    await sandbox.wait_for(engine_in_im, within=20, what="the engine listed in its instance manager")
    message = await setting_refused(sandbox, "v1-data-engine", "false")
    assert (
        "cannot apply v1-data-engine setting to Longhorn workloads when there are attached v1 volumes"
        in message
    )
    # read-only settings: only the manager's writes (with its annotation) go through
    message = await setting_refused(sandbox, "current-longhorn-version", "v9.9.9")
    assert "setting current-longhorn-version is read-only" in message
    await sandbox.patch(
        "settings",
        "current-longhorn-version",
        {"metadata": {"annotations": {FROM_LONGHORN: ""}}, "value": "v1.10.1"},
    )
    with pytest.raises(client.ApiException) as refused:
        await sandbox.delete("settings", "taint-toleration")
    assert "setting taint-toleration can be modified but not deleted" in str(refused.value.body)
    # the back door: a bad value stored as given, for tests of what corral does with it
    bad = await sandbox.get("settings", "taint-toleration")
    sandbox.emulator.load("longhorn.io", "settings", [{**bad, "value": "key2:InvalidEffect"}])
    assert (await sandbox.get("settings", "taint-toleration"))["value"] == "key2:InvalidEffect"


async def test_sc17_share_manager_and_backing_image_manager_pods(sandbox: Sandbox) -> None:
    assert pods(sandbox, "longhorn.io/component=backing-image-manager") == [], "no backing image used"
    using = await sandbox.create_volume("bi-user", replicas=3, node="node-1")
    await sandbox.patch("volumes", using["metadata"]["name"], {"spec": {"backingImage": "bi-1"}})

    async def bims() -> list[dict[str, Any]]:
        found = pods(sandbox, "longhorn.io/component=backing-image-manager")
        return found if len(found) == 3 else []

    found = await sandbox.wait_for(bims, within=20, what="a backing-image manager per node using it")
    assert {p["spec"]["nodeName"] for p in found} == {"node-1", "node-2", "node-3"}
    for name, migratable in (("rwx-1", False), ("rwx-m", True)):
        body = {"spec": {"accessMode": "rwx", "migratable": migratable}}
        volume = await sandbox.create_volume(name, replicas=1, node="node-1")
        await sandbox.patch("volumes", volume["metadata"]["name"], body)

    async def share_manager() -> dict[str, Any] | None:
        found = sandbox.emulator.get("", "pods", NS, "share-manager-rwx-1")
        return found if found and (found.get("status") or {}).get("phase") == "Running" else None

    pod = await sandbox.wait_for(share_manager, within=20, what="share-manager-rwx-1 running")
    assert pod["metadata"]["labels"]["longhorn.io/component"] == "share-manager"
    assert sandbox.emulator.get("", "pods", NS, "share-manager-rwx-m") is None
    # recreated from the current settings after a delete
    await sandbox.set_setting("priority-class", "system-cluster-critical")
    core = client.CoreV1Api(sandbox.api)
    await core.delete_namespaced_pod("share-manager-rwx-1", NS)
    await core.delete_namespaced_pod(found[0]["metadata"]["name"], NS)

    async def recreated() -> bool:
        again = [
            sandbox.emulator.get("", "pods", NS, n)
            for n in ("share-manager-rwx-1", found[0]["metadata"]["name"])
        ]
        return all(
            p is not None and p["spec"].get("priorityClassName") == "system-cluster-critical" for p in again
        )

    await sandbox.wait_for(recreated, within=20, what="both pods back with the new priority class")
    await sandbox.patch("volumes", "rwx-1", {"spec": {"nodeID": ""}})
    await sandbox.wait_for(
        lambda: _gone(sandbox, "share-manager-rwx-1"), within=20, what="the share manager gone on detach"
    )


async def _gone(sandbox: Sandbox, pod: str) -> bool:
    return sandbox.emulator.get("", "pods", NS, pod) is None


async def test_sc18_volume_attachment_tickets(sandbox: Sandbox) -> None:
    await sandbox.create_volume("vol-va", replicas=1, node="node-1")

    async def satisfied() -> dict[str, Any] | None:
        va = await sandbox.find("volumeattachments", "vol-va")
        statuses = ((va or {}).get("status") or {}).get("attachmentTicketStatuses") or {}
        return va if statuses and all(s["satisfied"] for s in statuses.values()) else None

    va = await sandbox.wait_for(satisfied, within=20, what="a satisfied ticket")
    [(tid, ticket)] = va["spec"]["attachmentTickets"].items()
    assert tid == ticket_id("vol-va", "node-1")
    assert (ticket["type"], ticket["nodeID"]) == ("csi-attacher", "node-1")
    await sandbox.patch("volumes", "vol-va", {"spec": {"nodeID": ""}})

    async def no_tickets() -> bool:
        va = await sandbox.get("volumeattachments", "vol-va")
        return not va["spec"].get("attachmentTickets")

    await sandbox.wait_for(no_tickets, within=20, what="the ticket gone on detach")
    # a migratable RWX volume in a live migration holds a ticket on each node
    await sandbox.patch(
        "volumes", "vol-va", {"spec": {"accessMode": "rwx", "migratable": True, "nodeID": "node-1"}}
    )
    await sandbox.wait_volume("vol-va", lambda v: v.get("status", {}).get("state") == "attached", within=20)
    await sandbox.patch("volumes", "vol-va", {"spec": {"migrationNodeID": "node-2"}})

    async def both_satisfied() -> dict[str, Any] | None:
        va = await satisfied()
        return va if va is not None and len(va["spec"]["attachmentTickets"]) == 2 else None

    va = await sandbox.wait_for(both_satisfied, within=20, what="both migration tickets satisfied")
    assert {t["nodeID"] for t in va["spec"]["attachmentTickets"].values()} == {"node-1", "node-2"}


async def test_sc19_default_setting_configmap_reaches_the_settings(sandbox: Sandbox) -> None:
    core = client.CoreV1Api(sandbox.api)

    async def exists() -> bool:
        return sandbox.emulator.get("", "configmaps", NS, CONFIGMAP) is not None

    await sandbox.wait_for(exists, within=20, what="the ConfigMap")
    values = {
        "taint-toleration": "key1=value1:NoSchedule",
        "priority-class": "no-such-class",  # refused by the webhook: skipped
        "concurrent-replica-rebuild-per-node-limit": 2,
    }
    await core.patch_namespaced_config_map(CONFIGMAP, NS, {"data": {KEY: yaml.safe_dump(values)}})

    async def propagated() -> bool:
        toleration = (await sandbox.get("settings", "taint-toleration"))["value"]
        limit = (await sandbox.get("settings", "concurrent-replica-rebuild-per-node-limit"))["value"]
        return bool(toleration == "key1=value1:NoSchedule" and limit == "2")

    await sandbox.wait_for(propagated, within=20, what="the ConfigMap's values in the Settings")
    assert (await sandbox.get("settings", "priority-class"))["value"] == ""


async def test_sc13_engine_image_daemonset_node_selector_waits_for_detach(sandbox: Sandbox) -> None:
    """§1.5: the engine-image controller patches the node selector into its DaemonSet only while
    every volume is detached."""
    core = client.CoreV1Api(sandbox.api)
    await core.patch_node("node-1", {"metadata": {"labels": {"disk": "ssd"}}})
    await sandbox.create_volume("vol-1", replicas=1, node="node-2")
    await sandbox.wait_volume("vol-1", lambda v: v.get("status", {}).get("state") == "attached", within=20)
    await sandbox.set_setting("system-managed-components-node-selector", "disk:ssd")

    def ei_daemonset() -> dict[str, Any]:
        [ds] = [
            d
            for d in sandbox.emulator.list("apps", "daemonsets", NS)
            if d["metadata"]["name"].startswith("engine-image-")
        ]
        return ds

    async def unchanged() -> bool:
        return not ei_daemonset()["spec"]["template"]["spec"].get("nodeSelector")

    await sandbox.stays(unchanged, 0.5, what="no node selector while a volume is attached")
    await sandbox.patch("volumes", "vol-1", {"spec": {"nodeID": ""}})

    async def on_node_1() -> bool:
        ds = ei_daemonset()
        pods = owned_by(sandbox, ds["metadata"]["name"])
        return ds["spec"]["template"]["spec"].get("nodeSelector") == {"disk": "ssd"} and [
            p["spec"].get("nodeName") for p in pods
        ] == ["node-1"]

    await sandbox.wait_for(on_node_1, within=20, what="the engine-image DaemonSet on node-1 alone")
