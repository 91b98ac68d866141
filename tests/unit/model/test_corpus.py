"""The corpus of real Longhorn objects (tests/data/corpus) through corral's decoders: every
v1beta2 and core object decodes, as the watcher decodes it (JSON bytes) and as `corral plan` does
(a parsed snapshot); `corral plan engine-upgrade` reads them all without a warning; v1beta1 ones
are refused naming their apiVersion; a support bundle's quirks are undone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from corral_cli.main import main as corral
from corral_cli.snapshots import normalise_bundle
from corral_engine_upgrade.image_facts import EngineImageFacts, node_map
from corral_model import longhorn as lh
from corral_model.snapshot import SnapshotError, read_items
from tests.fixtures.corpus import CorpusObject, corpus_list, corpus_objects

OBJECTS = corpus_objects()
READABLE = [o for o in OBJECTS if o.readable]
V1BETA1 = [o for o in OBJECTS if not o.readable]


def test_the_corpus_is_what_its_readme_lists() -> None:
    assert len(OBJECTS) == 20
    assert {o.kind for o in READABLE} == {
        "Volume",
        "Replica",
        "Engine",
        "EngineImage",
        "Node",
        "InstanceManager",
        "Pod",
    }
    assert {(o.api_version, o.kind) for o in V1BETA1} == {
        ("longhorn.io/v1beta1", "Setting"),
        ("longhorn.io/v1beta1", "InstanceManager"),
    }


@pytest.mark.parametrize("obj", OBJECTS, ids=lambda o: o.id)
def test_every_file_keeps_its_source(obj: CorpusObject) -> None:
    assert obj.header.startswith("# source: https://"), obj.header[:80]
    assert "# completeness:" in obj.header


@pytest.mark.parametrize("obj", READABLE, ids=lambda o: o.id)
def test_every_readable_object_decodes(obj: CorpusObject) -> None:
    struct = obj.info.struct
    from_bytes = msgspec.json.decode(json.dumps(obj.document).encode(), type=struct)  # the watcher
    from_snapshot = msgspec.convert(obj.document, struct)  # corral plan
    assert from_bytes == from_snapshot
    meta = obj.document["metadata"]
    assert (from_bytes.metadata.name, from_bytes.metadata.resource_version) == (
        meta["name"],
        meta.get("resourceVersion", ""),
    )
    # and what was decoded is what the file says, for the fields the rules read
    spec, status = obj.document.get("spec", {}), obj.document.get("status", {})
    if obj.kind == "Volume":
        assert from_bytes.spec.image == spec["image"]
        assert from_bytes.status.current_image == status["currentImage"]
        assert from_bytes.status.owner_id == status["ownerID"]
        assert from_bytes.status.current_node_id == status["currentNodeID"]  # "" when detached
    if obj.kind == "EngineImage":
        facts = msgspec.json.decode(json.dumps(obj.document).encode(), type=EngineImageFacts)
        assert node_map(facts.status.node_deployment_map) == status.get("nodeDeploymentMap", {})


def test_the_engine_with_null_status_maps_decodes_them_as_empty() -> None:
    [engine_file] = [o for o in READABLE if o.kind == "Engine"]
    assert engine_file.document["status"]["backupStatus"] is None  # as published
    engine = msgspec.convert(engine_file.document, lh.Engine)
    assert len(engine.status.replica_mode_map) == 4  # a stale replica beside the three addressed
    nulled = json.loads(json.dumps(engine_file.document))
    nulled["status"]["replicaModeMap"] = None  # as it is once the engine stops
    assert msgspec.convert(nulled, lh.Engine).status.replica_mode_map == {}


def test_corral_plan_reads_the_corpus_without_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snapshot = tmp_path / "corpus.json"
    snapshot.write_text(json.dumps(corpus_list(READABLE)))
    assert read_items(corpus_list(READABLE)).undecodable == []
    code = corral(["plan", "engine-upgrade", "--snapshot", str(snapshot), "--explain", "--strict"])
    captured = capsys.readouterr()
    assert (code, captured.err) == (0, "")
    explained = {json.loads(line)["name"] for line in captured.out.splitlines()}
    volumes = {o.name for o in READABLE if o.kind == "Volume"}
    assert explained == volumes  # every volume judged (no default-image setting: none chosen)


@pytest.mark.parametrize("obj", V1BETA1, ids=lambda o: o.id)
def test_a_v1beta1_object_is_refused_naming_its_api_version(
    obj: CorpusObject, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SnapshotError, match=r"apiVersion longhorn\.io/v1beta1"):
        read_items(corpus_list([*READABLE, obj]))
    snapshot = tmp_path / "old.json"
    snapshot.write_text(json.dumps(corpus_list([*READABLE, obj])))
    assert corral(["plan", "engine-upgrade", "--snapshot", str(snapshot)]) == 2
    assert f"{obj.kind} {obj.name} has apiVersion longhorn.io/v1beta1" in capsys.readouterr().err


def test_the_support_bundle_quirks_of_the_corpus_are_undone() -> None:
    """The Harvester support bundle's Setting and instance manager: "null" for "" (or null)."""
    by_id: dict[str, Any] = {o.id: o.document for o in OBJECTS}
    setting = normalise_bundle(by_id["Setting/sb-v123-harvester-backup-target-stringnull"])
    assert "value" not in setting  # read as absent: the empty default
    im = normalise_bundle(by_id["InstanceManager/sb-v123-harvester-im-engine-v1beta1"])
    assert "engineImage" not in im["spec"] and im["spec"]["nodeID"] == "node1"
