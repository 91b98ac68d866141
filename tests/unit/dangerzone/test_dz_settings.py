"""The typed snapshot: defaults for missing Settings, per-engine reads (spec §3.1, §3.2 readers)."""

from __future__ import annotations

import pytest

from corral_dangerzone.errors import SettingValueError
from corral_dangerzone.settings import DangerZoneSettings
from corral_dangerzone.table import SettingName
from corral_model.longhorn import ObjectMeta, Setting, Toleration


def test_defaults_match_the_table() -> None:
    s = DangerZoneSettings.defaults()
    assert s.tolerations == ()
    assert s.node_selector == {}
    assert s.priority_class == ""
    assert s.guaranteed_instance_manager_cpu == {"v1": 12.0, "v2": 12.0}
    assert (s.v1_data_engine, s.v2_data_engine) == (True, False)
    assert s.hugepage_enabled == {"v2": True}
    assert s.memory_size_mib == {"v2": 2048}
    assert s.cpu_mask == {"v2": "0x3"}
    assert s.number_of_cpu_cores == {"v2": 0}
    assert (s.interrupt_mode_enabled, s.cpu_isolation_enabled) == ({"v2": False}, {"v2": True})
    assert (s.iobuf_large_pool_size, s.iobuf_small_pool_size) == ({"v2": 1024}, {"v2": 8192})
    assert (
        s.engine_image_liveness_probe_period,
        s.engine_image_liveness_probe_timeout,
        s.engine_image_liveness_probe_failure_threshold,
    ) == (5, 4, 3)
    assert s.instance_manager_liveness_probe_timeout == 10
    assert s.log_path == "/var/lib/longhorn/logs"
    assert s.concurrent_replica_rebuild_per_node_limit == 5


def test_from_setting_objects_ignores_other_settings() -> None:
    objects = [
        Setting(metadata=ObjectMeta(name="taint-toleration"), value="key1=value1:NoSchedule"),
        Setting(metadata=ObjectMeta(name="priority-class"), value="system-cluster-critical"),
        Setting(metadata=ObjectMeta(name="upgrade-checker"), value="false"),
        Setting(metadata=ObjectMeta(name="guaranteed-instance-manager-cpu"), value='{"v1":"10","v2":"12"}'),
    ]
    s = DangerZoneSettings.from_settings(objects)
    assert s.tolerations == (Toleration(key="key1", operator="Equal", value="value1", effect="NoSchedule"),)
    assert s.priority_class == "system-cluster-critical"
    assert s.guaranteed_instance_manager_cpu == {"v1": 10.0, "v2": 12.0}
    assert "upgrade-checker" not in s.raw


def test_a_value_that_does_not_parse_names_the_setting() -> None:
    with pytest.raises(SettingValueError, match="instance-manager-pod-liveness-probe-timeout"):
        DangerZoneSettings.from_values({"instance-manager-pod-liveness-probe-timeout": "ten"})
    with pytest.raises(SettingValueError, match="invalid effect"):
        DangerZoneSettings.from_values({"taint-toleration": "a:Bad"})


def test_engine_missing_from_a_stored_value_is_a_read_error() -> None:
    s = DangerZoneSettings.from_values({"guaranteed-instance-manager-cpu": '{"v1":"10"}'})
    assert (
        s.for_engine(s.guaranteed_instance_manager_cpu, SettingName.GUARANTEED_INSTANCE_MANAGER_CPU, "v1")
        == 10.0
    )
    with pytest.raises(SettingValueError, match="for data engine v2 is not defined"):
        s.for_engine(s.guaranteed_instance_manager_cpu, SettingName.GUARANTEED_INSTANCE_MANAGER_CPU, "v2")


def test_data_engine_toggles() -> None:
    s = DangerZoneSettings.from_values({"v1-data-engine": "false", "v2-data-engine": "true"})
    assert (s.data_engine_enabled("v1"), s.data_engine_enabled("v2")) == (False, True)
