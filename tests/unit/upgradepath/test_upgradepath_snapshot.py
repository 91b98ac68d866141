"""Snapshot reading: kubectl List shapes in JSON and YAML, and clear errors for everything else."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral_upgradepath.snapshot import SnapshotError, parse_snapshot, read_snapshot

DATA = Path(__file__).parents[2] / "data" / "upgradepath"


def test_json_list_with_settings_and_engine_images() -> None:
    view = read_snapshot(DATA / "allowed-minor-v1.10.2.json")
    assert view.current_version == "v1.10.2"
    assert view.version_setting is not None
    assert view.version_setting.metadata.uid  # kept, so an Event can point at this exact object
    assert [(e.metadata.name, e.status.ref_count, e.status.cli_api_version) for e in view.engine_images] == [
        ("ei-3b9e5c1a", 9, 10),
        ("ei-7a1d0f42", 0, 7),
    ]


def test_yaml_list() -> None:
    view = read_snapshot(DATA / "blocked-engine-v1.10.0.yaml")
    assert view.current_version == "v1.10.0"
    assert {e.metadata.name for e in view.engine_images} == {"ei-3b9e5c1a", "ei-7a1d0f42"}


def test_typed_list_whose_items_have_no_kind() -> None:
    view = read_snapshot(DATA / "setting-list-prerelease-v1.11.0-rc2.yaml")
    assert view.current_version == "v1.11.0-rc2"
    assert view.engine_images == ()


def test_no_version_setting_is_a_fresh_install() -> None:
    view = read_snapshot(DATA / "fresh-install.json")
    assert view.version_setting is None
    assert view.current_version == ""


def test_single_object_and_unknown_kinds() -> None:
    data = b"""
kind: Setting
apiVersion: longhorn.io/v1beta2
metadata: {name: current-longhorn-version, namespace: longhorn-system,
           creationTimestamp: 2026-10-01T10:00:00Z}
value: v1.10.1
"""
    view = parse_snapshot(data)
    assert view.current_version == "v1.10.1"
    assert view.version_setting is not None
    assert view.version_setting.metadata.creation_timestamp == "2026-10-01T10:00:00Z"
    pods = b'{"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "p"}}]}'
    assert parse_snapshot(pods).version_setting is None


def test_namespace_selection() -> None:
    with pytest.raises(SnapshotError, match=r"no Setting or EngineImage in namespace 'longhorn-system'"):
        read_snapshot(DATA / "other-namespace.json")
    view = read_snapshot(DATA / "other-namespace.json", namespace="longhorn")
    assert view.current_version == "v1.9.3"
    assert len(view.engine_images) == 1


def test_mixed_namespaces_keep_only_the_requested_one() -> None:
    data = b"""{"kind": "List", "items": [
      {"kind": "Setting", "metadata": {"name": "current-longhorn-version", "namespace": "a"},
       "value": "v1.1.0"},
      {"kind": "Setting", "metadata": {"name": "current-longhorn-version", "namespace": "b"},
       "value": "v1.2.0"}
    ]}"""
    assert parse_snapshot(data, namespace="b").current_version == "v1.2.0"


@pytest.mark.parametrize(
    ("data", "complaint"),
    [
        (b'{"kind": "List", "items": [', "not JSON or YAML"),
        (b"a: [unclosed", "not JSON or YAML"),
        (b"[1, 2]", "expected a Kubernetes object or List, got list"),
        (b"just text", "expected a Kubernetes object or List, got str"),
        (b'{"items": []}', "the document has no `kind`"),
        (b'{"kind": "List", "items": {"a": 1}}', "`items` is not a list"),
        (b'{"kind": "List", "items": [7]}', r"items\[0\] is not an object"),
        (
            b'{"kind": "List", "items": [{"kind": "Setting", "metadata": {"name": "x"}, "value": 1.5}]}',
            r"item 0 \(Setting x\): Expected `str`, got `float` - at `\$.value`",
        ),
    ],
)
def test_bad_snapshots(data: bytes, complaint: str) -> None:
    with pytest.raises(SnapshotError, match=complaint):
        parse_snapshot(data)


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"cannot read snapshot .*missing\.json: No such file"):
        read_snapshot(tmp_path / "missing.json")
    with pytest.raises(SnapshotError, match=r"snapshot .*broken\.json: not JSON or YAML"):
        read_snapshot(DATA / "broken.json")
    with pytest.raises(SnapshotError, match=r"item 0 \(EngineImage ei-bad\): Expected `int`, got `str`"):
        read_snapshot(DATA / "bad-engine-image-field.json")
