"""What the im-restart scenarios observe, and the two invariants they assert at every observation.

The invariants are judged *inside the API server*, at the instant of each write, by admission
hooks that never refuse anything (they only take notes): a poll could miss a pod that was deleted
and replaced between two looks, the server cannot.

* **Never a busy delete.** When an instance-manager pod is deleted, the IM as the server holds it
  then must list no engine or replica `running` or `starting`, and no engine or replica may report
  itself `running` or `starting` in that IM. Deletes the test makes itself (a crash it injects) are
  declared with `crash()` and not judged.
* **Optionally, a restart limit**: with `restart_limit` set, no pod is deleted while that many other
  IMs are still restarting (pod gone or not running, or the IM not yet running again).
* **At most one new pod per idle period.** Per IM, pod deletes are counted while it stays idle; the
  count starts over when the IM is seen busy, or when the test changes a setting (a new reason to
  restart). Two deletes in one idle period is a second restart for the same settings, unless the
  pod deleted was not built from the settings the server holds: the simulator builds a pod from its
  own watch-fed view, as longhorn-manager does from its informer cache, so a replacement made
  right after a setting write can lag it, and restarting that pod is im-restart's job.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from corral_sandbox.emulator import Emulator
from corral_sandbox.simulator import objects
from corral_sandbox.simulator.im_nodes import allocatable_millicpu, node_cpu_request
from corral_sandbox.simulator.view import ClusterView
from tests.fixtures.sandbox import Sandbox

LONGHORN = "longhorn.io"
IM_LABEL = "longhorn.io/component"
ACTIVE = ("running", "starting")
# The parts of an IM pod that Longhorn builds from settings (objects.instance_manager_pod).
SETTINGS_SPEC = ("tolerations", "containers", "nodeSelector", "priorityClassName", "volumes")


def busy_instances(im: dict[str, Any] | None) -> list[str]:
    """The engines and replicas an IM's status lists as `running` or `starting`."""
    status = (im or {}).get("status", {}) or {}
    names = []
    for field in ("instanceEngines", "instanceEngineFrontends", "instanceReplicas"):
        for name, process in (status.get(field) or {}).items():
            if (process.get("status", {}) or {}).get("state") in ACTIVE:
                names.append(name)
    return sorted(names)


class ImObserver:
    """Admission hooks on pods and instance managers that record every IM pod delete, judged."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox
        self.namespace = sandbox.namespace
        self.violations: list[str] = []
        self.deletes: Counter[str] = Counter()
        """IM name → pod deletes seen (any deleter)."""
        self.deleted_uids: dict[str, list[str]] = {}
        self._idle_deletes: Counter[str] = Counter()
        self._crashes: set[str] = set()
        self.restart_limit = 0
        """When set, the most IMs restarting at once (im-restart's max-concurrent-im-restarts)."""
        self.most_restarting = 0
        emulator: Emulator = sandbox.emulator
        emulator.register_admission("", "pods", self._pod, name="observer.im-restart")
        emulator.register_admission(
            LONGHORN, "instancemanagers", self._im, name="observer.im-restart", include_status=True
        )

    # --- what the test tells the observer ---------------------------------------------------------

    def crash(self, pod: str) -> None:
        """The test itself is about to delete this pod (an injected crash): do not judge it."""
        self._crashes.add(pod)

    def settings_changed(self) -> None:
        """A new reason to restart every idle IM once more."""
        self._idle_deletes.clear()

    async def set_setting(self, name: str, value: str) -> None:
        self.settings_changed()
        await self.sandbox.set_setting(name, value)

    # --- the invariants ------------------------------------------------------------------------------

    async def holds(self) -> None:
        """For `Sandbox.wait_for(invariant=…)`: raise at the first observation after a violation."""
        assert not self.violations, "\n".join(self.violations)

    def _im(self, operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is not None and busy_instances(new):
            self._idle_deletes.pop(new["metadata"]["name"], None)  # busy: a new idle period begins

    def _pod(self, operation: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if operation != "DELETE" or old is None:
            return
        meta = old.get("metadata", {})
        if (meta.get("labels") or {}).get(IM_LABEL) != "instance-manager" or meta.get("deletionTimestamp"):
            return
        name = meta["name"]
        self.deletes[name] += 1
        self.deleted_uids.setdefault(name, []).append(meta.get("uid", ""))
        if name in self._crashes:
            self._crashes.discard(name)
            return
        im = self.sandbox.emulator.get(LONGHORN, "instancemanagers", self.namespace, name)
        busy = busy_instances(im)
        busy += self._instances_running_in(name)
        if busy:
            self.violations.append(f"pod of busy IM {name} deleted; busy: {sorted(set(busy))}")
        if im is None or im.get("metadata", {}).get("deletionTimestamp"):
            return  # the IM itself goes: not a restart
        restarting = 1 + len(self._restarting(besides=name))
        self.most_restarting = max(self.most_restarting, restarting)
        if self.restart_limit and restarting > self.restart_limit:
            self.violations.append(
                f"pod of {name} deleted with {restarting - 1} other IMs restarting"
                f" (limit {self.restart_limit})"
            )
        if not self._built_from_current_settings(old, im):
            self._idle_deletes[name] = 0  # a pod built from stale settings: restarting it is right
        self._idle_deletes[name] += 1
        if self._idle_deletes[name] > 1:
            self.violations.append(
                f"IM {name}: pod replaced {self._idle_deletes[name]} times in one idle period"
                f" (uids {self.deleted_uids[name]})"
            )

    def _restarting(self, besides: str) -> list[str]:
        found = []
        for im in self.sandbox.emulator.list(LONGHORN, "instancemanagers", self.namespace):
            name = im["metadata"]["name"]
            if name == besides:
                continue
            pod = self.sandbox.emulator.get("", "pods", self.namespace, name)
            running = (
                pod is not None
                and not pod["metadata"].get("deletionTimestamp")
                and (pod.get("status") or {}).get("phase") == "Running"
                and (im.get("status") or {}).get("currentState") == "running"
            )
            if not running:
                found.append(name)
        return found

    def _built_from_current_settings(self, pod: dict[str, Any], im: dict[str, Any]) -> bool:
        """Whether `pod` is what the IM's pod would be if built now from the server's settings."""
        emulator = self.sandbox.emulator
        view = ClusterView.empty()
        for kind, group, plural, namespace in (
            ("setting", LONGHORN, "settings", self.namespace),
            ("node", LONGHORN, "nodes", self.namespace),
            ("kubenode", "", "nodes", None),
        ):
            for obj in emulator.list(group, plural, namespace):
                view.upsert(kind, obj)
        node = im["spec"]["nodeID"]
        allocatable = allocatable_millicpu(view, node, self.sandbox.cluster.config.default_node_millicpu)
        fresh = objects.instance_manager_pod(im, view.setting, allocatable, node_cpu_request(view, node))
        held_annotations = pod["metadata"].get("annotations") or {}
        return all(pod["spec"].get(key) == fresh["spec"].get(key) for key in SETTINGS_SPEC) and all(
            held_annotations.get(key) == value for key, value in fresh["metadata"]["annotations"].items()
        )

    def _instances_running_in(self, im_name: str) -> list[str]:
        found = []
        for plural in ("engines", "replicas"):
            for obj in self.sandbox.emulator.list(LONGHORN, plural, self.namespace):
                status = obj.get("status", {}) or {}
                if status.get("instanceManagerName") == im_name and status.get("currentState") in ACTIVE:
                    found.append(f"{plural[:-1]} {obj['metadata']['name']} {status['currentState']}")
        return found

    # --- reading the cluster ---------------------------------------------------------------------------

    async def managers(self, node: str = "", engine: str = "v1") -> list[dict[str, Any]]:
        return [
            im
            for im in await self.sandbox.list("instancemanagers")
            if (not node or im["spec"]["nodeID"] == node) and im["spec"]["dataEngine"] == engine
        ]

    async def manager(self, node: str, engine: str = "v1") -> dict[str, Any]:
        [im] = await self.managers(node, engine)
        return im

    async def pod(self, name: str) -> dict[str, Any] | None:
        return self.sandbox.emulator.get("", "pods", self.namespace, name)

    async def pod_uid(self, name: str) -> str:
        pod = await self.pod(name)
        return str(pod["metadata"]["uid"]) if pod else ""

    async def running_pod(self, name: str, not_uid: str = "") -> dict[str, Any] | None:
        """The IM's pod once it runs (and is not the pod `not_uid`), with its IM running too."""
        pod = await self.pod(name)
        im = await self.sandbox.find("instancemanagers", name)
        if (
            pod is None
            or pod["metadata"]["uid"] == not_uid
            or (pod.get("status") or {}).get("phase") != "Running"
            or im is None
            or im.get("status", {}).get("currentState") != "running"
        ):
            return None
        return pod


def setting_synced(im: dict[str, Any]) -> dict[str, Any] | None:
    for held in im.get("status", {}).get("conditions") or []:
        if held.get("type") == "SettingSynced":
            return dict(held)
    return None


def tolerations(pod: dict[str, Any]) -> list[dict[str, Any]]:
    annotation = (pod["metadata"].get("annotations") or {}).get("longhorn.io/last-applied-tolerations", "[]")
    return list(json.loads(annotation))
