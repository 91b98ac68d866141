"""`corral plan` on messy snapshots: objects that do not decode (warned about, left out, explained
as `unreadable`; refused with --strict), nulls on nullable fields, longhorn.io/v1beta1 (refused,
naming the apiVersion), and Longhorn support bundles, zipped or unpacked, with their exporter's
quirks. Built on the recorded cluster of tests/data/engine_upgrade/rules.json."""

from __future__ import annotations

import copy
import json
import zipfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from corral_cli.main import main as corral
from corral_cli.snapshots import normalise_bundle

DATA = Path(__file__).resolve().parents[2] / "data" / "engine_upgrade"
RULES: dict[str, Any] = json.loads((DATA / "rules.json").read_text())
NS = "longhorn-system"


def plan(
    snapshot: Path, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, list[dict[str, Any]], str]:
    code = corral(["plan", "engine-upgrade", "--snapshot", str(snapshot), "--now", "1000", *flags])
    captured = capsys.readouterr()
    return code, [json.loads(line) for line in captured.out.splitlines()], captured.err


def with_items(*extra: dict[str, Any]) -> dict[str, Any]:
    document = copy.deepcopy(RULES)
    document["items"].extend(extra)
    return document


def write(tmp_path: Path, document: dict[str, Any], name: str = "cluster.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


BROKEN_VOLUME = {
    "apiVersion": "longhorn.io/v1beta2",
    "kind": "Volume",
    "metadata": {"name": "broken", "namespace": NS, "uid": "uid-broken", "resourceVersion": "4242"},
    "spec": {"image": "whatever", "numberOfReplicas": "three"},
}
STOPPED_ENGINE = {  # the example: what a stopped Engine looks like
    "apiVersion": "longhorn.io/v1beta2",
    "kind": "Engine",
    "metadata": {"name": "cand-a-e-0", "namespace": NS},
    "spec": {"volumeName": "cand-a"},
    "status": {
        "currentState": "stopped",
        "replicaModeMap": None,
        "backupStatus": None,
        "conditions": None,
        "snapshots": None,
    },
}


def test_the_recorded_plan_is_unchanged_by_a_stopped_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, before, _ = plan(write(tmp_path, RULES, "rules.json"), capsys)
    code_after, after, err = plan(write(tmp_path, with_items(STOPPED_ENGINE)), capsys)
    assert (code, code_after, err) == (0, 0, "")
    assert after == before and [c["name"] for c in after] == ["cand-a", "deploying-current", "offline-dr"]


def test_an_undecodable_volume_is_named_left_out_and_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines, err = plan(write(tmp_path, with_items(BROKEN_VOLUME)), capsys, "--explain")
    assert code == 0
    assert "left out: Volume longhorn-system/broken at resourceVersion 4242 does not decode" in err
    assert "numberOfReplicas" in err
    commands = [line["name"] for line in lines if not line.get("explain")]
    assert commands == ["cand-a", "deploying-current", "offline-dr"]  # the others as before
    [explained] = [line for line in lines if line.get("explain") and line["name"] == "broken"]
    assert explained["reason"] == "unreadable" and "numberOfReplicas" in explained["detail"]


def test_strict_refuses_a_snapshot_with_an_undecodable_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines, err = plan(write(tmp_path, with_items(BROKEN_VOLUME)), capsys, "--strict")
    assert code == 2 and lines == []
    assert "refused: Volume longhorn-system/broken" in err and "(--strict)" in err
    code, _, err = plan(write(tmp_path, RULES), capsys, "--strict")
    assert (code, err) == (0, "")


def test_v1beta1_objects_are_refused_naming_the_api_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old_setting = {
        "apiVersion": "longhorn.io/v1beta1",
        "kind": "Setting",
        "metadata": {"name": "backup-target", "namespace": NS},
        "value": "",
    }
    code, lines, err = plan(write(tmp_path, with_items(old_setting)), capsys)
    assert code == 2 and lines == []
    assert "Setting backup-target has apiVersion longhorn.io/v1beta1" in err
    assert "settings.v1beta2.longhorn.io" in err


# --- support bundles ------------------------------------------------------------------------------

_PLURALS = {"Volume": "volumes", "Replica": "replicas", "EngineImage": "engineimages", "Node": "nodes"}
_PLURALS |= {"Setting": "settings"}


def with_quirks(item: dict[str, Any]) -> dict[str, Any]:
    """What a lossy support-bundle exporter made of `item`: "" and null as the string "null",
    integers as floats."""

    def quirk(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: quirk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [quirk(v) for v in value]
        if value == "" or value is None:
            return "null"
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    quirky: dict[str, Any] = quirk(item)
    return quirky


def bundle_files(document: dict[str, Any], version: str = "v1beta2") -> dict[str, str]:
    """support-bundle-kit's layout: one List per resource and preferred version."""
    by_plural: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in document["items"]:
        item = with_quirks(item)
        item["apiVersion"] = f"longhorn.io/{version}"
        by_plural[_PLURALS[item["kind"]]].append(item)
    root = "supportbundle_0c4e_2026-11-25T06-00-00Z/yamls"
    files = {
        f"{root}/namespaced/{NS}/longhorn.io/{version}/{plural}.yaml": yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": items}
        )
        for plural, items in by_plural.items()
    }
    files[f"{root}/cluster/v1/namespaces.yaml"] = "apiVersion: v1\nkind: List\nitems: []\n"
    files["supportbundle_0c4e_2026-11-25T06-00-00Z/logs/longhorn-system/manager.log"] = "log line\n"
    return files


def write_zip(path: Path, files: dict[str, str]) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, text in files.items():
            bundle.writestr(name, text)
    return path


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / next(iter(files)).split("/")[0]


def test_a_support_bundle_plans_as_the_export_it_was_made_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, expected, _ = plan(write(tmp_path, RULES), capsys, "--explain")
    files = bundle_files(RULES)
    zipped = write_zip(tmp_path / "supportbundle.zip", files)
    unpacked = write_tree(tmp_path / "unpacked", files)
    for snapshot in (zipped, unpacked):
        code, lines, err = plan(snapshot, capsys, "--explain")
        assert (code, err) == (0, "")
        assert lines == expected


def test_a_support_bundle_of_longhorn_1_2_is_refused_naming_v1beta1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zipped = write_zip(tmp_path / "old.zip", bundle_files(RULES, version="v1beta1"))
    code, lines, err = plan(zipped, capsys)
    assert code == 2 and lines == []
    assert "apiVersion longhorn.io/v1beta1" in err


def test_a_zip_that_is_no_support_bundle_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zipped = write_zip(tmp_path / "other.zip", {"readme.txt": "hello"})
    code, _, err = plan(zipped, capsys)
    assert code == 2 and "not a support bundle" in err


def test_exporter_quirks_are_undone() -> None:
    quirky = {
        "items": [
            {
                "metadata": {"name": "n1", "deletionTimestamp": "null"},
                "status": {"storageMaximum": 1.18225516953e11, "ratio": 0.5, "lastProbeTime": None},
                "spec": {"tags": ["null"], "size": "10737418240"},
            }
        ]
    }
    assert normalise_bundle(quirky) == {
        "items": [
            {
                "metadata": {"name": "n1"},
                "status": {"storageMaximum": 118225516953, "ratio": 0.5},
                "spec": {"tags": ["null"], "size": "10737418240"},
            }
        ]
    }
