"""Instance-manager pod vs settings (spec §4.3 steps 3-5, §4.5; scenarios IM-01, IM-02, IM-12, DZ-02)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corral_dangerzone.pod_spec import expected_instance_manager_pod
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.synced import (
    PodContext,
    cpu_mask_applied,
    danger_zone_sync,
    hugepage_check,
    not_synced_message,
    unsynced_settings,
)
from corral_model.longhorn import (
    Container,
    DataEngineStatus,
    DataEngineV2Status,
    InstanceManager,
    InstanceManagerStatus,
    InstanceProcess,
    InstanceProcessStatus,
    KubeNode,
    ObjectMeta,
    Pod,
    PodSpec,
    PodVolume,
    Probe,
)
from tests.unit.dangerzone.builders import instance_manager, kube_node, longhorn_node


def fresh(engine: str, values: dict[str, str]) -> tuple[InstanceManager, Pod]:
    """An IM and the pod Longhorn would have created for it under `values`, with the IM status it records."""
    im = instance_manager(engine)
    exp = expected_instance_manager_pod(
        im, DangerZoneSettings.from_values(values), longhorn_node(), kube_node()
    )
    if exp.v2_status is not None:
        v2 = DataEngineV2Status(
            cpu_mask=exp.v2_status.cpu_mask,
            cpu_core_number=exp.v2_status.cpu_core_number,
            interrupt_mode_enabled=exp.v2_status.interrupt_mode_enabled,
        )
        im = instance_manager(
            engine, status=InstanceManagerStatus(data_engine_status=DataEngineStatus(v2=v2))
        )
    return im, exp.to_pod(im.metadata.name)


def lagging(im: InstanceManager, pod: Pod, values: dict[str, str], *, ready: bool = True) -> tuple[str, ...]:
    ctx = PodContext(im=im, pod=pod, node=longhorn_node(ready=ready), kube_node=kube_node())
    return tuple(n.value for n in unsynced_settings(DangerZoneSettings.from_values(values), ctx))


CHANGES = [
    ("v1", "taint-toleration", "key1=value1:NoSchedule"),
    ("v1", "system-managed-components-node-selector", "kubernetes.io/hostname:node-1"),
    ("v1", "priority-class", "system-cluster-critical"),
    ("v1", "storage-network", "kube-system/demo"),
    ("v1", "guaranteed-instance-manager-cpu", "20"),
    ("v1", "v1-data-engine", "false"),
    ("v1", "instance-manager-pod-liveness-probe-timeout", "30"),
    ("v2", "v2-data-engine", "false"),
    ("v2", "log-path", "/var/log/longhorn"),
    ("v2", "data-engine-interrupt-mode-enabled", "true"),
    ("v2", "data-engine-iobuf-large-pool-size", "2048"),
    ("v2", "data-engine-iobuf-small-pool-size", "16384"),
    ("v2", "data-engine-cpu-isolation-enabled", "false"),
]
BASE = {"v2-data-engine": "true"}


@pytest.mark.parametrize(("engine", "name", "value"), CHANGES, ids=[f"4.5-{c[1]}" for c in CHANGES])
def test_one_changed_setting_is_exactly_what_lags(engine: str, name: str, value: str) -> None:
    im, pod = fresh(engine, BASE)
    assert lagging(im, pod, BASE) == ()
    assert lagging(im, pod, {**BASE, name: value}) == (name,)


@pytest.mark.parametrize(
    ("engine", "name", "value"),
    [
        pytest.param("v1", "log-path", "/var/log/longhorn", id="4.5-log-path-v1-not-checked"),
        pytest.param("v1", "data-engine-interrupt-mode-enabled", "true", id="4.5-v2-settings-ignored-for-v1"),
        pytest.param("v1", "data-engine-iobuf-large-pool-size", "4096", id="4.5-iobuf-ignored-for-v1"),
        pytest.param("v1", "v2-data-engine", "false", id="4.5-other-engine-toggle"),
        pytest.param(
            "v2", "guaranteed-instance-manager-cpu", '{"v1":"30","v2":"12"}', id="DZ-10-v1-part-only"
        ),
        pytest.param("v1", "endpoint-network-for-rwx-volume", "ns/nad", id="4.5-not-an-im-setting"),
        pytest.param("v1", "concurrent-replica-rebuild-per-node-limit", "1", id="4.5-every-other-is-synced"),
        pytest.param("v2", "data-engine-memory-size", "4096", id="4.5-hugepage-is-step-4"),
        pytest.param(
            "v2", "data-engine-iobuf-large-pool-size", "1000", id="4.5-iobuf-at-default-flag-absent"
        ),
    ],
)
def test_changes_that_do_not_lag(engine: str, name: str, value: str) -> None:
    im, pod = fresh(engine, BASE)
    assert lagging(im, pod, {**BASE, name: value}) == ()


def test_guaranteed_cpu_on_a_node_not_ready_counts_as_synced() -> None:
    im, pod = fresh("v1", {})
    assert lagging(im, pod, {"guaranteed-instance-manager-cpu": "30"}, ready=False) == ()


def test_per_node_override_is_what_the_pod_must_carry() -> None:
    im, pod = fresh("v1", {})
    ctx = PodContext(im=im, pod=pod, node=longhorn_node(cpu_request=150), kube_node=kube_node())
    assert [n.value for n in unsynced_settings(DangerZoneSettings.defaults(), ctx)] == [
        "guaranteed-instance-manager-cpu"
    ]


def test_cpu_request_compared_as_quantity() -> None:
    im, pod = fresh("v1", {})
    container = pod.spec.containers[0]
    as_cores = container.__replace__(resources=container.resources.__replace__(requests={"cpu": "0.48"}))
    pod = pod.__replace__(spec=pod.spec.__replace__(containers=(as_cores,)))
    assert lagging(im, pod, {}) == ()


def test_last_applied_annotation_missing_with_no_tolerations_is_synced() -> None:
    im, pod = fresh("v1", {})
    bare = pod.__replace__(metadata=ObjectMeta(name=pod.metadata.name))
    assert lagging(im, bare, {}) == ()
    assert lagging(im, bare, {"taint-toleration": "a:NoSchedule"}) == ("taint-toleration",)


def test_tolerations_compared_as_a_set() -> None:
    im, pod = fresh("v1", {"taint-toleration": "a:NoSchedule;b=1:NoExecute"})
    assert lagging(im, pod, {"taint-toleration": "b=1:NoExecute; a:NoSchedule"}) == ()


def test_lenient_pods() -> None:
    im = instance_manager("v2")
    bare = Pod(metadata=ObjectMeta(name="im"), spec=PodSpec(containers=(Container(),)))
    # no liveness probe, no mounts, no log volume: those settings count as synced
    lag = lagging(im, bare, {"v2-data-engine": "true", "instance-manager-pod-liveness-probe-timeout": "5"})
    assert "instance-manager-pod-liveness-probe-timeout" not in lag
    assert "log-path" not in lag
    # iobuf flags absent and settings at default: synced; CPU isolation wanted but flags absent: not
    assert "data-engine-iobuf-large-pool-size" not in lag
    assert "data-engine-cpu-isolation-enabled" in lag


def test_log_volume_checked_only_with_mounts() -> None:
    im, pod = fresh("v2", BASE)
    container = pod.spec.containers[0]
    no_mounts = pod.__replace__(
        spec=pod.spec.__replace__(containers=(container.__replace__(volume_mounts=None),))
    )
    assert lagging(im, no_mounts, {**BASE, "log-path": "/elsewhere/logs"}) == ()
    no_log_volume = pod.__replace__(spec=pod.spec.__replace__(volumes=(PodVolume(name="host"),)))
    assert lagging(im, no_log_volume, {**BASE, "log-path": "/elsewhere/logs"}) == ()


def test_probe_timeout_compares_timeout_only() -> None:
    im, pod = fresh("v1", {})
    container = pod.spec.containers[0]
    other_period = container.__replace__(liveness_probe=Probe(timeout_seconds=10, period_seconds=99))
    assert lagging(im, pod.__replace__(spec=pod.spec.__replace__(containers=(other_period,))), {}) == ()


def _running(state: str) -> InstanceManagerStatus:
    return InstanceManagerStatus(
        instance_replicas={"r": InstanceProcess(status=InstanceProcessStatus(state=state))}
    )


@pytest.mark.parametrize(
    ("im_state", "instance_state", "has_pod", "verdict"),
    [
        pytest.param("starting", None, True, (False, True, False), id="4.3-not-running-im"),
        pytest.param("running", "running", True, (False, False, True), id="IM-02-running-instance"),
        pytest.param("running", "starting", True, (False, False, True), id="IM-02-starting-instance"),
        pytest.param("running", "stopped", True, (False, False, False), id="IM-02-stopped-instance-is-idle"),
        pytest.param("running", None, False, (False, True, False), id="4.3-pod-missing"),
    ],
)
def test_sync_verdict(
    im_state: str, instance_state: str | None, has_pod: bool, verdict: tuple[bool, bool, bool]
) -> None:
    status = _running(instance_state) if instance_state else None
    im = instance_manager("v1", state=im_state, status=status)
    _, pod = fresh("v1", {})
    ctx = PodContext(im=im, pod=pod, node=longhorn_node(), kube_node=kube_node()) if has_pod else None
    result = danger_zone_sync(DangerZoneSettings.from_values({"priority-class": "pc"}), ctx, im)
    assert (result.synced, result.pod_gone_or_not_running, result.instances_running) == verdict
    if verdict == (False, False, False):
        assert [n.value for n in result.unsynced] == ["priority-class"]


def test_idle_synced_pod_verdict_and_message() -> None:
    im, pod = fresh("v1", {})
    ctx = PodContext(im=im, pod=pod, node=longhorn_node(), kube_node=kube_node())
    assert danger_zone_sync(DangerZoneSettings.defaults(), ctx, im).synced
    assert not_synced_message(("taint-toleration", "priority-class")) == (
        "Settings [taint-toleration priority-class] are not synced"
    )
    assert not_synced_message(("data-engine-hugepage-enabled",), hugepage_blocked=True) == (
        "Settings [data-engine-hugepage-enabled] are not synced; "
        "skipping pod deletion because sufficient hugepage capacity for rescheduling cannot be confirmed"
    )


def _v2_status(mask: str = "", cores: int = 0) -> InstanceManagerStatus:
    return InstanceManagerStatus(
        data_engine_status=DataEngineStatus(v2=DataEngineV2Status(cpu_mask=mask, cpu_core_number=cores))
    )


@pytest.mark.parametrize(
    ("values", "spec_mask", "status", "state", "applied"),
    [
        pytest.param({}, "", _v2_status("0x3"), "running", True, id="4.3-3-setting-mask-matches"),
        pytest.param(
            {"data-engine-cpu-mask": "0-3"},
            "",
            _v2_status("0x3"),
            "running",
            False,
            id="4.3-3-setting-changed",
        ),
        pytest.param({}, "0xf", _v2_status("0xf"), "running", True, id="4.3-3-im-mask-wins"),
        pytest.param({}, "0xf", _v2_status("0x3"), "running", False, id="4.3-3-im-mask-not-applied"),
        pytest.param(
            {"data-engine-number-of-cpu-cores": "2"}, "", _v2_status("", 2), "running", True, id="4.3-3-cores"
        ),
        pytest.param(
            {"data-engine-number-of-cpu-cores": "2"},
            "",
            _v2_status("0x3"),
            "running",
            False,
            id="4.3-3-cores-lag",
        ),
        pytest.param(
            {"data-engine-cpu-mask": "0-3"}, "", _v2_status("0x3"), "starting", True, id="4.3-3-not-running"
        ),
    ],
)
def test_cpu_mask_applied(
    values: dict[str, str], spec_mask: str, status: InstanceManagerStatus, state: str, applied: bool
) -> None:
    im = instance_manager("v2", state=state, cpu_mask=spec_mask, status=status)
    assert cpu_mask_applied(DangerZoneSettings.from_values(values), im) is applied


def test_cpu_mask_always_applied_for_v1() -> None:
    im = instance_manager("v1", status=_v2_status("0x1"))
    assert cpu_mask_applied(DangerZoneSettings.from_values({"data-engine-cpu-mask": "0-3"}), im)


@pytest.mark.parametrize(
    ("values", "node", "check"),
    [
        pytest.param({}, kube_node(hugepages="4Gi"), (True, True), id="4.3-4-synced"),
        pytest.param(
            {"data-engine-memory-size": "4096"},
            kube_node(hugepages="4Gi"),
            (False, False),
            id="IM-12-capacity",
        ),
        pytest.param(
            {"data-engine-memory-size": "4096"},
            kube_node(hugepages="2Gi"),
            (True, False),
            id="IM-12-no-capacity",
        ),
        pytest.param(
            {"data-engine-memory-size": "4096"},
            kube_node(hugepages_capacity="8Gi"),
            (False, False),
            id="4.3-4-capacity-fallback",
        ),
        pytest.param(
            {"data-engine-memory-size": "4096"}, kube_node(), (True, False), id="4.3-4-no-hugepages-at-all"
        ),
        pytest.param(
            {"data-engine-hugepage-enabled": "false"},
            kube_node(),
            (False, False),
            id="4.3-4-disabled-always-fits",
        ),
    ],
)
def test_hugepage_check(values: dict[str, str], node: KubeNode, check: tuple[bool, bool]) -> None:
    im, pod = fresh("v2", {})
    result = hugepage_check(DangerZoneSettings.from_values(values), im, pod, node)
    assert (result.applied, result.synced) == check


def test_hugepage_check_skipped_for_v1_stopped_or_podless() -> None:
    s = DangerZoneSettings.from_values({"data-engine-memory-size": "4096"})
    im, pod = fresh("v2", {})
    assert hugepage_check(s, im, None, kube_node()) == hugepage_check(
        s, instance_manager("v1"), pod, kube_node()
    )
    assert hugepage_check(s, instance_manager("v2", state="stopped"), pod, kube_node()).synced


_settings = st.fixed_dictionaries(
    {},
    optional={
        "taint-toleration": st.sampled_from(["", "a:NoSchedule", "a=b:NoExecute;c:", ":"]),
        "system-managed-components-node-selector": st.sampled_from(["", "a:1", "a:1;b:2"]),
        "priority-class": st.sampled_from(["", "pc"]),
        "storage-network": st.sampled_from(["", "ns/nad"]),
        "guaranteed-instance-manager-cpu": st.sampled_from(["0", "12", "40", '{"v1":"5","v2":"25"}']),
        "instance-manager-pod-liveness-probe-timeout": st.sampled_from(["1", "10", "60"]),
        "log-path": st.sampled_from(["", "/var/log/lh", "/"]),
        "data-engine-number-of-cpu-cores": st.sampled_from(["0", "2"]),
        "data-engine-cpu-mask": st.sampled_from(["0x3", "0-5"]),
        "data-engine-iobuf-large-pool-size": st.sampled_from(["1024", "4096"]),
        "data-engine-iobuf-small-pool-size": st.sampled_from(["8192", "9000"]),
        "data-engine-interrupt-mode-enabled": st.sampled_from(["true", "false"]),
        "data-engine-cpu-isolation-enabled": st.sampled_from(["true", "false"]),
        "data-engine-hugepage-enabled": st.sampled_from(["true", "false"]),
        "data-engine-memory-size": st.sampled_from(["1024", "2048"]),
    },
)


@settings(max_examples=150)
@given(_settings, st.sampled_from(["v1", "v2"]))
def test_a_fresh_pod_is_in_line_with_its_settings(values: dict[str, str], engine: str) -> None:
    values = {**values, "v2-data-engine": "true"}
    im, pod = fresh(engine, values)
    s = DangerZoneSettings.from_values(values)
    ctx = PodContext(im=im, pod=pod, node=longhorn_node(), kube_node=kube_node(hugepages="8Gi"))
    assert danger_zone_sync(s, ctx, im).synced
    assert hugepage_check(s, im, pod, kube_node()).synced
    running = im.__replace__(status=im.status.__replace__(current_state="running"))
    assert cpu_mask_applied(s, running)
