"""The danger-zone table against spec §3.1 (rows, types, defaults, data-engine-specific flags) and
§3.3 (apply groups)."""

from __future__ import annotations

import pytest

from corral_dangerzone.errors import SettingNotSupportedError
from corral_dangerzone.table import (
    DANGER_ZONE,
    ApplyGroup,
    SettingType,
    default_log_path,
    default_value,
    definition,
    is_danger_zone,
    settings_in_group,
)

# §3.1's table, transcribed: name, type, default, data-engine-specific, (min, max).
SPEC_TABLE = [
    ("taint-toleration", "string", "", False, (None, None)),
    ("system-managed-components-node-selector", "string", "", False, (None, None)),
    ("system-managed-csi-components-resource-limits", "string", "", False, (None, None)),
    ("priority-class", "", "", False, (None, None)),
    ("concurrent-replica-rebuild-per-node-limit", "int", "5", False, (0, None)),
    ("concurrent-backing-image-replenish-per-node-limit", "int", "5", False, (0, None)),
    ("guaranteed-instance-manager-cpu", "float", '{"v1":"12","v2":"12"}', True, (0, 40)),
    ("storage-network", "string", "", False, (None, None)),
    ("endpoint-network-for-rwx-volume", "string", "", False, (None, None)),
    ("v1-data-engine", "bool", "true", False, (None, None)),
    ("v2-data-engine", "bool", "false", False, (None, None)),
    ("data-engine-hugepage-enabled", "bool", '{"v2":"true"}', True, (None, None)),
    ("data-engine-memory-size", "int", '{"v2":"2048"}', True, (0, None)),
    ("data-engine-iobuf-large-pool-size", "int", '{"v2":"1024"}', True, (1024, None)),
    ("data-engine-iobuf-small-pool-size", "int", '{"v2":"8192"}', True, (8192, None)),
    ("data-engine-cpu-mask", "string", '{"v2":"0x3"}', True, (None, None)),
    ("data-engine-number-of-cpu-cores", "int", '{"v2":"0"}', True, (0, None)),
    ("data-engine-interrupt-mode-enabled", "bool", '{"v2":"false"}', True, (None, None)),
    ("data-engine-cpu-isolation-enabled", "bool", '{"v2":"true"}', True, (None, None)),
    ("disable-snapshot-purge", "bool", "false", False, (None, None)),
    ("engine-image-pod-liveness-probe-period", "int", "5", False, (1, 60)),
    ("engine-image-pod-liveness-probe-timeout", "int", "4", False, (1, 60)),
    ("engine-image-pod-liveness-probe-failure-threshold", "int", "3", False, (1, 60)),
    ("instance-manager-pod-liveness-probe-timeout", "int", "10", False, (1, 60)),
    ("log-path", "string", "/var/lib/longhorn/logs", False, (None, None)),
]


def test_table_has_exactly_the_spec_rows_in_spec_order() -> None:
    assert [name.value for name in DANGER_ZONE] == [row[0] for row in SPEC_TABLE]


@pytest.mark.parametrize(
    ("name", "type_", "default", "des", "bounds"), SPEC_TABLE, ids=[r[0] for r in SPEC_TABLE]
)
def test_row_matches_spec_3_1(
    name: str, type_: str, default: str, des: bool, bounds: tuple[int, int]
) -> None:
    row = definition(name)
    assert row.type is SettingType(type_)
    assert row.default == default == default_value(name)
    assert row.data_engine_specific is des
    assert (row.minimum, row.maximum) == bounds
    assert is_danger_zone(name)


@pytest.mark.parametrize(
    ("group", "names"),
    [
        (
            ApplyGroup.ALL_VOLUMES_DETACHED,
            {
                "taint-toleration",
                "system-managed-components-node-selector",
                "priority-class",
                "storage-network",
            },
        ),
        (ApplyGroup.RWX_VOLUMES_DETACHED, {"endpoint-network-for-rwx-volume"}),
        (
            ApplyGroup.NO_PRECONDITION,
            {
                "system-managed-csi-components-resource-limits",
                "engine-image-pod-liveness-probe-period",
                "engine-image-pod-liveness-probe-timeout",
                "engine-image-pod-liveness-probe-failure-threshold",
            },
        ),
        (ApplyGroup.PER_DATA_ENGINE, {"v1-data-engine", "v2-data-engine", "guaranteed-instance-manager-cpu"}),
    ],
    ids=["A", "B", "C", "D"],
)
def test_apply_groups_follow_spec_3_3(group: ApplyGroup, names: set[str]) -> None:
    assert {n.value for n in settings_in_group(group)} == names


def test_every_setting_is_in_exactly_one_group() -> None:
    grouped = [n for g in ApplyGroup for n in settings_in_group(g)]
    assert sorted(grouped) == sorted(DANGER_ZONE)


@pytest.mark.parametrize(
    ("name", "engines"),
    [
        ("guaranteed-instance-manager-cpu", ("v1", "v2")),
        ("data-engine-cpu-mask", ("v2",)),
        ("priority-class", ("all",)),
    ],
)
def test_default_engines_are_the_default_keys(name: str, engines: tuple[str, ...]) -> None:
    assert definition(name).default_engines == engines


@pytest.mark.parametrize("name", ["upgrade-checker", "default-engine-image", "", "Taint-Toleration"])
def test_non_danger_zone_names(name: str) -> None:
    assert not is_danger_zone(name)
    with pytest.raises(SettingNotSupportedError, match=f"^setting {name} is not supported$"):
        definition(name)


@pytest.mark.parametrize(
    ("control_path", "log_path"),
    [("/var/lib/longhorn", "/var/lib/longhorn/logs"), ("/data/lh/", "/data/lh/logs"), ("/", "/logs")],
)
def test_log_path_default_follows_the_control_path(control_path: str, log_path: str) -> None:
    assert default_log_path(control_path) == log_path
