"""DZ-12 and DZ-13 (acceptance-scenarios.md §3.3): a toleration changed through the
`longhorn-default-setting` ConfigMap (the manager writes the Setting; application still waits for
the detach), and the danger-zone settings that need no detach (CSI resource limits, the
engine-image liveness probes, the rebuild limit). Invariants of scenario.py at every observation."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from corral_sandbox.simulator.default_settings import CONFIGMAP, KEY
from tests.fixtures.sandbox import Sandbox
from tests.fixtures.services import Running
from tests.scenarios.setting_sync.scenario import CSI_PLUGIN, NS, Observer
from tests.scenarios.setting_sync.volumes import attached, detach

pytestmark = pytest.mark.scenario
TOLERATION = "taint-toleration"
LIMITS = "system-managed-csi-components-resource-limits"
REBUILD = "concurrent-replica-rebuild-per-node-limit"
PROBES = {
    "engine-image-pod-liveness-probe-period": "15",
    "engine-image-pod-liveness-probe-timeout": "30",
    "engine-image-pod-liveness-probe-failure-threshold": "10",
}


async def settled(sandbox: Sandbox) -> Observer:
    observer = Observer(sandbox)
    await observer.until(
        lambda: observer.rolled_out() and observer.im_pods_running(), what="a settled cluster"
    )
    return observer


def busy(observer: Observer) -> dict[str, str]:
    pods = observer.im_pods()
    return {
        im["metadata"]["name"]: pods[im["metadata"]["name"]]["metadata"]["uid"]
        for im in observer.objects("longhorn.io", "instancemanagers")
        if (im.get("status") or {}).get("instanceEngines") and im["metadata"]["name"] in pods
    }


async def test_dz_12_toleration_through_the_default_setting_configmap(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    observer = await settled(sandbox)
    await attached(sandbox, "vol-1")
    await observer.until(lambda: bool(busy(observer)), what="the engine running")
    kept = busy(observer)
    value = "key1=value1:NoSchedule"
    data = {KEY: yaml.safe_dump({TOLERATION: value})}
    await client.CoreV1Api(sandbox.api).patch_namespaced_config_map(CONFIGMAP, NS, {"data": data})
    await observer.until(
        lambda: observer.setting(TOLERATION).get("value") == value,
        what="the Setting value from the ConfigMap",
    )
    stored = observer.setting(TOLERATION)
    observer.watching = (TOLERATION, value, int(stored["metadata"]["resourceVersion"]))
    await observer.until(lambda: not observer.applied(TOLERATION), what="applied=false while attached")
    await observer.holds(
        lambda: busy(observer) == kept and not observer.applied(TOLERATION),
        1.0,
        what="deferred while attached",
    )
    await detach(sandbox, "vol-1")
    await observer.until(
        lambda: (
            observer.applied(TOLERATION) and not observer.lagging(TOLERATION, value) and observer.rolled_out()
        ),
        what="applied after the detach",
    )
    assert observer.claims > 0


async def unapplied(sandbox: Sandbox, name: str) -> None:
    """Mark a setting unapplied (as Longhorn's controller leaves a failed one), so `applied=true`
    afterwards is setting-sync's doing."""
    await sandbox.patch_status("settings", name, {"status": {"applied": False}})


def container(observer: Observer, pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


async def test_dz_13_settings_that_need_no_detach_apply_at_once(
    sandbox: Sandbox, stack: list[Running]
) -> None:
    observer = await settled(sandbox)
    await attached(sandbox, "vol-1")
    limits = {
        "csi-attacher": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}},
        "longhorn-csi-plugin": {"requests": {"memory": "64Mi"}},
    }
    await unapplied(sandbox, LIMITS)
    await observer.set_setting(LIMITS, json.dumps(limits))

    def limits_applied() -> bool:
        attacher = observer.workload_pods("csi-attacher")
        plugin = observer.workload_pods(CSI_PLUGIN)
        return (
            observer.applied(LIMITS)
            and observer.rolled_out()
            and bool(attacher and plugin)
            and all(
                container(observer, p, "csi-attacher").get("resources") == limits["csi-attacher"]
                for p in attacher
            )
            and all(
                container(observer, p, "longhorn-csi-plugin").get("resources")
                == limits["longhorn-csi-plugin"]
                for p in plugin
            )
        )

    await observer.until(limits_applied, what="CSI resource limits rolled out with a volume attached")
    await unapplied(sandbox, REBUILD)
    await observer.set_setting(REBUILD, "2")
    await observer.until(lambda: observer.applied(REBUILD), what="the rebuild limit applied while attached")
    volume = observer.get("longhorn.io", "volumes", "vol-1") or {}
    assert (volume.get("status") or {}).get("state") == "attached"
    # invalid engine-image probe values are refused at admission
    for name, value, text in (
        ("engine-image-pod-liveness-probe-period", "-1", "should be larger than or equal to 1"),
        ("engine-image-pod-liveness-probe-timeout", "0", "should be larger than or equal to 1"),
        ("engine-image-pod-liveness-probe-failure-threshold", "abc", "invalid syntax"),
    ):
        with pytest.raises(client.ApiException) as answer:
            await sandbox.patch("settings", name, {"value": value})
        assert text in str(answer.value.body), str(answer.value.body)


def engine_image_daemonsets(observer: Observer) -> list[dict[str, Any]]:
    return [
        d for d in observer.objects("apps", "daemonsets") if d["metadata"]["name"].startswith("engine-image-")
    ]


async def test_dz_13_engine_image_liveness_probes(sandbox: Sandbox, stack: list[Running]) -> None:
    observer = await settled(sandbox)
    await attached(sandbox, "vol-1")
    before = {
        p["metadata"]["uid"]
        for d in engine_image_daemonsets(observer)
        for p in observer.workload_pods(d["metadata"]["name"])
    }
    for name, value in PROBES.items():
        await observer.set_setting(name, value)

    def rolled() -> bool:
        for ds in engine_image_daemonsets(observer):
            probe = ds["spec"]["template"]["spec"]["containers"][0].get("livenessProbe") or {}
            wanted = (probe.get("periodSeconds"), probe.get("timeoutSeconds"), probe.get("failureThreshold"))
            if wanted != (15, 30, 10):
                return False
            pods = observer.workload_pods(ds["metadata"]["name"])
            if not pods or {p["metadata"]["uid"] for p in pods} & before:
                return False
        return observer.rolled_out() and all(observer.applied(n) for n in PROBES)

    await observer.until(rolled, within=4, what="engine-image DaemonSets rolled with the new probe")
    for ds in engine_image_daemonsets(observer):
        for pod in observer.workload_pods(ds["metadata"]["name"]):
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            assert all(s.get("restartCount") == 0 for s in statuses)
