"""The setting-derived fields of a new instance-manager pod (spec §4.4)."""

from __future__ import annotations

import json

import pytest

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.pod_spec import (
    ExpectedInstanceManagerPod,
    expected_instance_manager_pod,
    go_clean,
    instance_manager_log_path,
)
from corral_dangerzone.settings import DangerZoneSettings
from corral_model.longhorn import Toleration
from tests.unit.dangerzone.builders import instance_manager, kube_node, longhorn_node


def expected(
    engine: str = "v1", values: dict[str, str] | None = None, *, cpu_mask: str = "", cpu_isolation: str = ""
) -> ExpectedInstanceManagerPod:
    settings = DangerZoneSettings.from_values(values or {})
    return expected_instance_manager_pod(
        instance_manager(engine, cpu_mask=cpu_mask, cpu_isolation=cpu_isolation),
        settings,
        longhorn_node(),
        kube_node(),
    )


def test_v1_pod_with_defaults() -> None:
    pod = expected()
    assert pod.node_name == "node-1"
    assert pod.tolerations == ()
    assert pod.annotations == {"longhorn.io/last-applied-tolerations": "[]"}
    assert pod.node_selector == {}
    assert pod.priority_class_name == ""
    assert pod.resources.requests == {"cpu": "480m"}
    assert pod.resources.limits == {}
    assert pod.args == ("instance-manager", "--debug", "daemon", "--listen", ":8500")
    probe = pod.liveness_probe
    assert (
        probe.timeout_seconds,
        probe.period_seconds,
        probe.initial_delay_seconds,
        probe.failure_threshold,
    ) == (
        10,
        11,
        3,
        6,
    )
    assert pod.log_host_path == "/var/lib/longhorn/logs"
    assert pod.v2_status is None


def test_settings_reach_their_fields() -> None:
    pod = expected(
        values={
            "taint-toleration": "key1=value1:NoSchedule;key1=value1:NoSchedule",
            "system-managed-components-node-selector": "kubernetes.io/hostname:node-1",
            "priority-class": "system-cluster-critical",
            "storage-network": "kube-system/demo",
            "guaranteed-instance-manager-cpu": "0",
            "instance-manager-pod-liveness-probe-timeout": "20",
            "log-path": "/var/log/longhorn/",
        }
    )
    assert pod.tolerations == (Toleration(key="key1", operator="Equal", value="value1", effect="NoSchedule"),)
    assert (
        len(json.loads(pod.annotations["longhorn.io/last-applied-tolerations"])) == 2
    )  # the list, not the set
    assert pod.annotations["k8s.v1.cni.cncf.io/networks"] == (
        '[{"namespace": "kube-system", "name": "demo", "interface": "lhnet1"}]'
    )
    assert pod.node_selector == {"kubernetes.io/hostname": "node-1"}
    assert pod.priority_class_name == "system-cluster-critical"
    assert pod.resources.requests == {}
    assert (pod.liveness_probe.timeout_seconds, pod.liveness_probe.period_seconds) == (20, 21)
    assert pod.log_host_path == "/var/log/longhorn"


def test_v2_pod_with_defaults() -> None:
    pod = expected("v2")
    assert pod.args == (
        "start-spdk-tgt",
        "--spdk-log", "all",
        "--spdk-cpumask", "0x3",
        "--spdk-core-number", "0",
        "--spdk-memory-size", "2048",
        "--longhorn-control-path", "/var/lib/longhorn",
        "--enable-spdk", "--debug", "daemon", "--spdk-enabled", "--listen", "0.0.0.0:8500",
        "--enable-irq-affinity", "--enable-workqueue-affinity", "--enable-rps",
    )  # fmt: skip
    assert pod.resources.requests == {"cpu": "480m", "memory": "128Mi"}
    assert pod.resources.limits == {"hugepages-2Mi": "2048Mi"}
    assert pod.v2_status is not None
    assert (pod.v2_status.cpu_mask, pod.v2_status.cpu_core_number, pod.v2_status.interrupt_mode_enabled) == (
        "0x3",
        0,
        "false",
    )


def test_v2_options() -> None:
    pod = expected(
        "v2",
        {
            "data-engine-hugepage-enabled": "false",
            "data-engine-memory-size": "4096",
            "data-engine-iobuf-large-pool-size": "4096",
            "data-engine-iobuf-small-pool-size": "8192",
            "data-engine-interrupt-mode-enabled": "true",
            "data-engine-cpu-isolation-enabled": "false",
        },
    )
    args = pod.args
    assert args[args.index("--spdk-iobuf-large-pool-size") + 1] == "4096"
    assert "--spdk-iobuf-small-pool-size" not in args  # not above the SPDK default
    assert args.index("--spdk-iobuf-large-pool-size") < args.index("daemon")
    assert "--spdk-interrupt-mode" in args
    assert "--enable-irq-affinity" not in args
    assert args[-1] == "--spdk-no-hugepage"
    assert pod.resources.limits == {"hugepages-2Mi": "0Mi"}
    assert pod.v2_status is not None and pod.v2_status.interrupt_mode_enabled == "true"


def test_v2_dynamic_pinning() -> None:
    pod = expected("v2", {"data-engine-number-of-cpu-cores": "2"}, cpu_mask="0xf")
    assert pod.args[pod.args.index("--spdk-cpumask") + 1] == ""
    assert pod.resources.requests == {"cpu": "2", "memory": "128Mi"}
    assert pod.resources.limits == {"hugepages-2Mi": "2048Mi", "cpu": "2", "memory": "128Mi"}
    assert pod.v2_status is not None and (pod.v2_status.cpu_mask, pod.v2_status.cpu_core_number) == ("", 2)


@pytest.mark.parametrize(("override", "flags"), [("true", True), ("false", False), ("", True)])
def test_im_cpu_mask_and_isolation_overrides(override: str, flags: bool) -> None:
    pod = expected("v2", {"data-engine-cpu-mask": "0x3"}, cpu_mask="0xc", cpu_isolation=override)
    assert pod.args[pod.args.index("--spdk-cpumask") + 1] == "0xc"
    assert ("--enable-rps" in pod.args) is flags


def test_v2_needs_a_cpu_mask() -> None:
    with pytest.raises(SettingValueError, match="failed to get CPU mask setting for data engine v2"):
        expected("v2", {"data-engine-cpu-mask": '{"v2":""}'})


@pytest.mark.parametrize(
    ("setting", "path"),
    [
        ("", "/var/lib/longhorn/logs"),
        ("/", "/var/lib/longhorn/logs"),
        ("/logs", "/var/lib/longhorn/logs"),
        ("relative", "/var/lib/longhorn/logs"),
        ("/var/log//lh/../longhorn/", "/var/log/longhorn"),
    ],
)
def test_log_path_fallbacks(setting: str, path: str) -> None:
    assert instance_manager_log_path(setting) == path


@pytest.mark.parametrize(
    ("path", "cleaned"), [("//a//b/", "/a/b"), ("", "."), ("a/../..", ".."), ("/..", "/")]
)
def test_go_clean(path: str, cleaned: str) -> None:
    assert go_clean(path) == cleaned


def test_to_pod_carries_the_fields() -> None:
    exp = expected(values={"priority-class": "pc", "system-managed-components-node-selector": "a:1"})
    pod = exp.to_pod("instance-manager-1", "longhorn-system")
    assert pod.metadata.annotations == exp.annotations
    assert pod.spec.priority_class_name == "pc"
    assert pod.spec.node_selector == {"a": "1"}
    assert pod.spec.containers[0].resources == exp.resources
    assert (
        pod.spec.volumes[0].host_path is not None and pod.spec.volumes[0].host_path.path == exp.log_host_path
    )
