"""Managed workloads and pods vs settings (spec §3.3 groups A and C; T3.2, DZ-04, DZ-08, DZ-09, DZ-13)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.tolerations import last_applied_annotation, parse_tolerations
from corral_dangerzone.workloads import (
    csi_plugin_template_annotation,
    csi_plugin_template_updated,
    engine_image_liveness_probe,
    node_selector_updated,
    priority_class_updated,
    storage_network_pod_updated,
    template_tolerations,
    tolerations_updated,
)
from corral_model.longhorn import Toleration

NETWORKS = "k8s.v1.cni.cncf.io/networks"


def test_t3_2_template_tolerations_replace_the_last_applied_ones() -> None:
    user_added = Toleration(key="user", operator="Exists", effect="NoSchedule")
    step1 = parse_tolerations("ex.com/foobar:NoExecute;ex.com/foobar:NoSchedule")
    step2 = parse_tolerations("node-role.kubernetes.io/controlplane=true:NoSchedule")
    after1 = template_tolerations([user_added], [], step1)
    assert after1 == (user_added, *step1)
    after2 = template_tolerations(after1, step1, step2)
    assert after2 == (user_added, *step2)  # step 1's tolerations are gone, the user's stay
    assert template_tolerations(after2, step2, ()) == (user_added,)  # T3.2 step 3: ""


def test_tolerations_updated_reads_the_annotation_only() -> None:
    wanted = parse_tolerations("key1=value1:NoSchedule; key2:NoExecute")
    assert tolerations_updated(last_applied_annotation(wanted), wanted)
    assert tolerations_updated(last_applied_annotation(list(reversed(wanted))), wanted)
    assert not tolerations_updated(None, wanted)
    assert tolerations_updated(None, ())  # missing annotation = []
    assert not tolerations_updated("[]", wanted)


def test_priority_class_and_selector() -> None:
    s = DangerZoneSettings.from_values(
        {"priority-class": "system-cluster-critical", "system-managed-components-node-selector": "a:1"}
    )
    assert priority_class_updated("system-cluster-critical", s)
    assert not priority_class_updated("", s)
    assert node_selector_updated({"a": "1"}, s)
    assert not node_selector_updated(None, s)
    assert node_selector_updated(None, DangerZoneSettings.defaults())
    assert node_selector_updated({}, DangerZoneSettings.defaults())


def test_dz_08_storage_network_pods() -> None:
    s = DangerZoneSettings.from_values({"storage-network": "kube-system/demo"})
    expected = '[{"namespace": "kube-system", "name": "demo", "interface": "lhnet1"}]'
    assert storage_network_pod_updated({NETWORKS: expected}, s)
    assert not storage_network_pod_updated({}, s)
    assert storage_network_pod_updated({}, DangerZoneSettings.defaults())
    assert not storage_network_pod_updated({NETWORKS: expected}, DangerZoneSettings.defaults())


def test_dz_09_csi_plugin_uses_lhnet2_and_no_annotation_when_unset() -> None:
    s = DangerZoneSettings.from_values({"endpoint-network-for-rwx-volume": "ns/nad"})
    annotation = csi_plugin_template_annotation(s)
    assert annotation is not None and json.loads(annotation)[0]["interface"] == "lhnet2"
    assert csi_plugin_template_updated({NETWORKS: annotation}, s)
    assert not csi_plugin_template_updated({}, s)
    unset = DangerZoneSettings.defaults()
    assert csi_plugin_template_annotation(unset) is None
    assert csi_plugin_template_updated({}, unset)
    assert not csi_plugin_template_updated({NETWORKS: ""}, unset)  # must be absent, not empty


def test_dz_13_engine_image_probe() -> None:
    probe = engine_image_liveness_probe(
        DangerZoneSettings.from_values(
            {
                "engine-image-pod-liveness-probe-period": "15",
                "engine-image-pod-liveness-probe-timeout": "30",
                "engine-image-pod-liveness-probe-failure-threshold": "10",
            }
        )
    )
    assert (probe.period_seconds, probe.timeout_seconds, probe.failure_threshold) == (15, 30, 10)
    default = engine_image_liveness_probe(DangerZoneSettings.defaults())
    assert (default.period_seconds, default.timeout_seconds, default.failure_threshold) == (5, 4, 3)


_tol = st.builds(
    lambda k, e: Toleration(key=k, operator="Exists", effect=e),
    st.sampled_from(["a", "b", "c", "d"]),
    st.sampled_from(["", "NoSchedule", "NoExecute"]),
)


@given(st.lists(_tol, max_size=5), st.lists(_tol, max_size=5), st.lists(_tol, max_size=5))
def test_template_merge_laws(
    existing: list[Toleration], last: list[Toleration], new: list[Toleration]
) -> None:
    merged = template_tolerations(existing, last, new)
    assert all(t in merged for t in new)
    assert all(t in new for t in merged if t in last)
    assert all(t in merged for t in existing if t not in last)
    # applying the same setting again changes nothing
    assert set(template_tolerations(merged, new, new)) == set(merged)
