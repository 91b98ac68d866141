"""What the danger-zone scenarios observe in the API server, and the two invariants every observation
asserts (issue 13, "Must show"):

* **No busy instance-manager pod is deleted while the precondition fails.** An IM pod whose IM
  held engine or replica instances at one observation, while some volume was not detached, must
  still be there with the same UID at the next observation if some volume is still not detached.
* **`applied` never says true while a component still carries the old value.** Once the Setting
  shows `applied: true` in a write made after the scenario set the value (a resourceVersion newer
  than the one its own write got back), every component setting-sync applies it to (the managed CSI
  DaemonSet and Deployment templates, the instance-manager, share-manager and backing-image-manager
  pods) carries the value, by Longhorn's comparison for that setting (corral_dangerzone).

Observations read the emulator's store directly (one consistent instant, no await in between), so
a check never mixes two moments of the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from corral_dangerzone import DangerZoneSettings
from corral_dangerzone.network import CNI_NETWORKS_ANNOTATION, STORAGE_NETWORK_INTERFACE, cni_annotation
from corral_dangerzone.node_selector import same_node_selector
from corral_dangerzone.tolerations import (
    LAST_APPLIED_TOLERATIONS_ANNOTATION,
    decode_last_applied,
    same_toleration_set,
)
from corral_dangerzone.workloads import csi_plugin_template_annotation
from tests.fixtures.sandbox import Sandbox

Obj = dict[str, Any]
NS = "longhorn-system"
LONGHORN = "longhorn.io"
CSI_PLUGIN = "longhorn-csi-plugin"
CSI_DEPLOYMENTS = ("csi-attacher", "csi-provisioner", "csi-resizer", "csi-snapshotter")
UNMANAGED = ("longhorn-manager", "longhorn-ui", "longhorn-driver-deployer")
POD_COMPONENTS = ("instance-manager", "share-manager", "backing-image-manager")
NODES = ("node-1", "node-2", "node-3")


def carries(name: str, value: str, annotations: Obj, spec: Obj, *, csi_plugin: bool = False) -> bool:
    """Does an object with these (template) annotations and spec carry `name` = `value`?"""
    settings = DangerZoneSettings.from_values({name: value})
    if name == "taint-toleration":
        last = decode_last_applied(annotations.get(LAST_APPLIED_TOLERATIONS_ANNOTATION))
        return same_toleration_set(last, settings.tolerations)
    if name == "priority-class":
        return bool((spec.get("priorityClassName") or "") == value)
    if name == "system-managed-components-node-selector":
        return same_node_selector(spec.get("nodeSelector"), settings.node_selector)
    if name == "storage-network":
        expected = cni_annotation(value, STORAGE_NETWORK_INTERFACE) if value else ""
        return bool(annotations.get(CNI_NETWORKS_ANNOTATION, "") == expected)
    if name == "endpoint-network-for-rwx-volume":
        if not csi_plugin:
            return True
        return annotations.get(CNI_NETWORKS_ANNOTATION) == csi_plugin_template_annotation(settings)
    raise AssertionError(f"no component check for {name}")


_GROUP_A = ("taint-toleration", "priority-class", "system-managed-components-node-selector")


def applies_to(name: str, component: str) -> bool:
    """Which components setting-sync applies a setting to (its README's table): the CSI workloads'
    templates and the component pods for group A, IM and backing-image-manager pods for the storage
    network, the CSI plugin template for the RWX endpoint network."""
    if name in _GROUP_A:
        return True
    if name == "storage-network":
        return component in ("instance-manager", "backing-image-manager")
    if name == "endpoint-network-for-rwx-volume":
        return component == CSI_PLUGIN
    return False


class Observer:
    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.observations = 0
        self.busy: dict[str, str] = {}  # IM name → pod uid, when some volume was not detached
        self.claims = 0  # observations where applied=true was checked against the components
        self.watching: tuple[str, str, int] | None = None  # setting, value, rv of our own write

    # --- reads -----------------------------------------------------------------------------------

    def objects(self, group: str, plural: str, selector: str = "") -> list[Obj]:
        return self.sandbox.emulator.list(group, plural, NS, label_selector=selector)

    def get(self, group: str, plural: str, name: str) -> Obj | None:
        return self.sandbox.emulator.get(group, plural, NS, name)

    def setting(self, name: str) -> Obj:
        found = self.get(LONGHORN, "settings", name)
        assert found is not None, name
        return found

    def applied(self, name: str) -> bool:
        return bool((self.setting(name).get("status") or {}).get("applied"))

    def volumes_detached(self) -> bool:
        return all(
            (v.get("status") or {}).get("state") == "detached" for v in self.objects(LONGHORN, "volumes")
        )

    def pods(self, component: str) -> list[Obj]:
        return [
            p
            for p in self.objects("", "pods", f"longhorn.io/component={component}")
            if not p["metadata"].get("deletionTimestamp")
        ]

    def im_pods(self) -> dict[str, Obj]:
        return {p["metadata"]["name"]: p for p in self.pods("instance-manager")}

    def workload_pods(self, name: str) -> list[Obj]:
        return [
            p
            for p in self.objects("", "pods")
            if any(r.get("name") == name for r in p["metadata"].get("ownerReferences") or [])
            and not p["metadata"].get("deletionTimestamp")
        ]

    def uids(self, names: tuple[str, ...]) -> set[str]:
        return {p["metadata"]["uid"] for n in names for p in self.workload_pods(n)}

    def lagging(self, name: str, value: str) -> list[str]:
        """The components (by name) that do not carry `name` = `value` yet."""
        late = []
        for workload, plural in ((CSI_PLUGIN, "daemonsets"), *((d, "deployments") for d in CSI_DEPLOYMENTS)):
            obj = self.get("apps", plural, workload)
            if obj is None or not applies_to(name, workload):
                continue
            template = obj["spec"].get("template") or {}
            annotations = (template.get("metadata") or {}).get("annotations") or {}
            plugin = workload == CSI_PLUGIN
            if not carries(name, value, annotations, template.get("spec") or {}, csi_plugin=plugin):
                late.append(f"{plural}/{workload}")
        if name in _GROUP_A:
            # The engine-image DaemonSets' templates (labelled managed-by: Longhorn's setting
            # controller collects them); their pods follow by the rollout, as the CSI workloads'.
            for ds in self.objects("apps", "daemonsets"):
                ds_name = ds["metadata"]["name"]
                if not ds_name.startswith("engine-image-"):
                    continue
                template = ds["spec"].get("template") or {}
                annotations = (template.get("metadata") or {}).get("annotations") or {}
                if not carries(name, value, annotations, template.get("spec") or {}):
                    late.append(f"daemonsets/{ds_name}")
        for component in POD_COMPONENTS:
            if not applies_to(name, component):
                continue
            for pod in self.pods(component):
                annotations = pod["metadata"].get("annotations") or {}
                if not carries(name, value, annotations, pod.get("spec") or {}):
                    late.append(f"pods/{pod['metadata']['name']}")
        return late

    # --- the invariants ----------------------------------------------------------------------------

    async def set_setting(self, name: str, value: str) -> None:
        """Set a value and watch `applied` for it from now on."""
        await self.sandbox.set_setting(name, value)
        stored = self.setting(name)
        self.watching = (name, str(stored.get("value", "")), int(stored["metadata"]["resourceVersion"]))

    def check(self) -> None:
        self.observations += 1
        detached = self.volumes_detached()
        pods = self.im_pods()
        if not detached:
            for busy_im, uid in self.busy.items():
                pod = pods.get(busy_im)
                assert pod is not None and pod["metadata"]["uid"] == uid, (
                    f"the pod of busy instance manager {busy_im} was deleted while volumes were attached"
                )
        self.busy = {}
        if not detached:
            for im in self.objects(LONGHORN, "instancemanagers"):
                status = im.get("status") or {}
                im_name = im["metadata"]["name"]
                if (status.get("instanceEngines") or status.get("instanceReplicas")) and im_name in pods:
                    self.busy[im_name] = pods[im_name]["metadata"]["uid"]
        if self.watching is not None:
            name, value, rv = self.watching
            setting = self.setting(name)
            claimed = bool((setting.get("status") or {}).get("applied"))
            if claimed and int(setting["metadata"]["resourceVersion"]) > rv and setting.get("value") == value:
                self.claims += 1
                late = self.lagging(name, value)
                assert not late, f"{name} applied=true while {late} still carry the old value"

    async def invariant(self) -> None:
        self.check()

    async def until(self, probe: Callable[[], bool], *, within: float = 30.0, what: str = "") -> None:
        async def observed() -> bool:
            return probe()

        await self.sandbox.wait_for(
            observed, within=within, interval=0.02, what=what, invariant=self.invariant
        )

    async def holds(self, probe: Callable[[], bool], seconds: float, *, what: str = "") -> None:
        """A negative window: `probe` and the invariants hold at every observation for `seconds`."""

        async def observed() -> bool:
            self.check()
            return probe()

        await self.sandbox.stays(observed, seconds, what=what)

    # --- common probes -------------------------------------------------------------------------------

    def rolled_out(self) -> bool:
        """Every Longhorn DaemonSet and Deployment reports its current template on every pod."""
        for ds in self.objects("apps", "daemonsets"):
            status = ds.get("status") or {}
            if status.get("observedGeneration") != ds["metadata"].get("generation"):
                return False
            want = status.get("desiredNumberScheduled")
            if not (status.get("updatedNumberScheduled") == want == status.get("numberReady")):
                return False
        for deployment in self.objects("apps", "deployments"):
            status = deployment.get("status") or {}
            if status.get("observedGeneration") != deployment["metadata"].get("generation"):
                return False
            want = deployment["spec"].get("replicas", 1)
            if not (status.get("updatedReplicas") == want == status.get("readyReplicas")):
                return False
        return True

    def im_pods_running(self, count: int = len(NODES)) -> bool:
        pods = self.im_pods()
        return len(pods) == count and all(
            (p.get("status") or {}).get("phase") == "Running" for p in pods.values()
        )


def toleration_keys(pod: Obj) -> set[tuple[str, str, str, str]]:
    """A pod's tolerations other than Kubernetes' own (`node.kubernetes.io/…`, added to daemon pods)."""
    return {
        (t.get("key", ""), t.get("operator", ""), t.get("value", ""), t.get("effect", ""))
        for t in (pod.get("spec") or {}).get("tolerations") or []
        if not str(t.get("key", "")).startswith("node.kubernetes.io/")
    }


def network_status(pod: Obj) -> list[Obj]:
    raw = (pod["metadata"].get("annotations") or {}).get("k8s.v1.cni.cncf.io/network-status")
    return list(json.loads(raw)) if raw else []
