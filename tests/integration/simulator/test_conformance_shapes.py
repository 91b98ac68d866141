"""Simulator conformance SC-12 (after SC-11): the sandbox serializes Longhorn objects as Longhorn does.

What it compares. A sandbox runs a volume through create, attach, detach and a live engine upgrade
(so Engines and Replicas have been stopped, running and stopped again, an EngineImage deployed and
instance managers have held instances). Then every Volume, Engine, Replica, EngineImage, Node,
InstanceManager and Setting the API server holds is flattened into *shape paths* with the JSON type
at each: `spec.size: string`, `status.replicaModeMap{}: string` (`{}` stands for any key of a map —
a field the CRD declares with `additionalProperties` — and `[]` for any item of a list). `metadata`,
`apiVersion` and `kind` are left out (the API server writes those, not Longhorn's controllers).

Each path the sandbox holds must be a path of the real objects of the same kind in
tests/data/corpus (the union over that kind's files, whatever their Longhorn version: the nearest
one the corpus has), with one of the JSON types the corpus shows there; a literal `null` is allowed,
besides, exactly on the fields Longhorn v1.10's CRDs mark nullable (nullable-fields.md), and a map
or list there may be a `null`, `{}`/`[]` or hold entries. Paths the corpus cannot show because
Longhorn added them after the corpus object's release are listed in `NEWER_THAN_CORPUS`, each with
the release that added it, and are checked for their type only. So a key the simulator invents, a
size written as a number, a condition without `lastProbeTime` or a nil map written as `{}` where
Longhorn leaves the key out all fail here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
import yaml

from corral_sandbox.emulator.crds import default_crd_dir
from tests.fixtures.corpus import corpus_objects
from tests.fixtures.sandbox import UPGRADE_IMAGE, Sandbox
from tests.integration.simulator.test_conformance import (
    attached_volume,
    deployed_engine_image,
    detach,
    live_upgrade,
)
from tests.unit.simulator.test_crd_nullable_marks import release_paths

PLURALS = {
    "Volume": "volumes",
    "Engine": "engines",
    "Replica": "replicas",
    "EngineImage": "engineimages",
    "Node": "nodes",
    "InstanceManager": "instancemanagers",
    "Setting": "settings",
}
SKIPPED = ("metadata", "apiVersion", "kind")


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def crd_schemas() -> dict[str, dict[str, Any]]:
    directory = default_crd_dir()
    assert directory is not None
    out = {}
    for path in directory.glob("longhorn-*.yaml"):
        doc = yaml.safe_load(path.read_text())
        out[doc["spec"]["names"]["kind"]] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


def shape(value: Any, schema: Any, path: str = "") -> dict[str, set[str]]:
    """Shape path → the JSON types found there (see the module docstring)."""
    found: dict[str, set[str]] = defaultdict(set)
    if path:
        found[path].add(json_type(value))
    schema = schema if schema is not None else {}
    if isinstance(value, dict):
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if not path and key in SKIPPED:
                continue
            sub_schema: Any
            if isinstance(additional, dict):
                sub_path, sub_schema = f"{path}{{}}", additional
            else:
                sub_path = f"{path}.{key}" if path else key
                sub_schema = (schema.get("properties") or {}).get(key)
            for p, types in shape(item, sub_schema, sub_path).items():
                found[p] |= types
    elif isinstance(value, list):
        for item in value:
            for p, types in shape(item, schema.get("items"), f"{path}[]").items():
                found[p] |= types
    return found


CONDITION_KEYS = ("lastProbeTime", "lastTransitionTime", "message", "reason", "status", "type")


def _conditions(path: str, release: str) -> dict[str, tuple[str, str]]:
    keys = {f"{path}[].{key}": ("string", release) for key in CONDITION_KEYS}
    return {path: ("array", release), f"{path}[]": ("object", release), **keys}


# Paths the corpus cannot show: Longhorn added them after the release of every corpus object of the
# kind (or, for one, the corpus object lacks it by the bug it was filed for). path → (type, why).
NEWER_THAN_CORPUS: dict[str, dict[str, tuple[str, str]]] = {
    "Volume": {
        "spec.targetNodeIDForLiveUpgrade": ("string", "v2 data engine live upgrade, after v1.10.1"),
    },
    "Engine": {  # the corpus Engine is a v1.4.0-dev one
        "spec.image": ("string", "v1.5.0 renamed spec.engineImage to spec.image"),
        "spec.dataEngine": ("string", "v1.5.0 (backendStoreDriver), dataEngine since v1.6.0"),
        "spec.targetNodeIDForLiveUpgrade": ("string", "v2 data engine live upgrade, after v1.10.1"),
    },
    "EngineImage": {
        "status.incompatible": ("boolean", "the v1.6.0-dev corpus object is longhorn#7438's, without it"),
    },
    "Node": {  # the corpus Node is a v1.7.2 one
        "status.cpuPolicy": ("string", "v2 data engine CPU policy, after v1.7.2"),
    },
    "InstanceManager": {  # the corpus IMs are v1.5.0-dev ones
        "spec.dataEngine": ("string", "v1.6.0"),
        **_conditions("status.conditions", "v1.11.0 (nullable there); corral's im-restart writes it"),
    },
    "Setting": {  # the corpus Settings are v1beta1 (v1.1, v1.2.3)
        "status": ("object", "v1.7.0"),
        "status.applied": ("boolean", "v1.7.0"),
    },
}


def corpus_shapes() -> dict[str, dict[str, set[str]]]:
    schemas = crd_schemas()
    out: dict[str, dict[str, set[str]]] = {kind: defaultdict(set) for kind in PLURALS}
    for obj in corpus_objects():
        if obj.kind in out and obj.document.get("apiVersion", "").startswith("longhorn.io/"):
            for p, types in shape(obj.document, schemas[obj.kind]).items():
                out[obj.kind][p] |= types
    return out


def allowed_types(kind: str, path: str, corpus: dict[str, set[str]], schema_type: str) -> set[str]:
    allowed = set(corpus.get(path, set()))
    if path in NEWER_THAN_CORPUS.get(kind, {}):
        allowed.add(NEWER_THAN_CORPUS[kind][path][0])
    if path in release_paths("v1.10.x").get(kind, set()):
        allowed |= {"null", schema_type}
    return allowed


def schema_type_at(schema: dict[str, Any], path: str) -> str:
    node: dict[str, Any] = schema
    for token in path.replace("{}", ".{}").replace("[]", ".[]").split("."):
        if token == "{}":
            node = node.get("additionalProperties") or {}
        elif token == "[]":
            node = node.get("items") or {}
        else:
            node = (node.get("properties") or {}).get(token) or {}
    return str(node.get("type", ""))


def mismatches(kind: str, objects: list[dict[str, Any]], corpus: dict[str, set[str]]) -> list[str]:
    schema = crd_schemas()[kind]
    held: dict[str, set[str]] = defaultdict(set)
    for obj in objects:
        for p, types in shape(obj, schema).items():
            held[p] |= types
    out = []
    for path, types in sorted(held.items()):
        allowed = allowed_types(kind, path, corpus, schema_type_at(schema, path))
        if not allowed:
            out.append(f"{kind} {path}: {sorted(types)} (no such key in the corpus)")
        elif types - allowed:
            out.append(f"{kind} {path}: {sorted(types)} (corpus: {sorted(allowed)})")
    return out


@pytest.fixture(scope="module")
def corpus() -> dict[str, dict[str, set[str]]]:
    return corpus_shapes()


async def test_sc12_the_sandbox_writes_longhorns_shapes(
    sandbox: Sandbox, corpus: dict[str, dict[str, set[str]]]
) -> None:
    """SC-12: every key the sandbox holds on each Longhorn kind exists in the corpus with its type."""
    await deployed_engine_image(sandbox, UPGRADE_IMAGE)
    await attached_volume(sandbox, "shape-live", 3)
    await live_upgrade(sandbox, "shape-live", UPGRADE_IMAGE, 3)
    await detach(sandbox, "shape-live")
    found = []
    held: dict[str, list[dict[str, Any]]] = {}
    for kind, plural in PLURALS.items():
        held[kind] = await sandbox.list(plural)
        assert held[kind], f"the sandbox holds no {kind}"
        found += mismatches(kind, held[kind], corpus[kind])
    assert found == [], "\n".join(found)
    # and the shapes a tidy sandbox would not produce are there
    engine = await sandbox.engine_of("shape-live")
    assert engine["status"]["currentState"] == "stopped"
    assert "replicaModeMap" in engine["status"] and engine["status"]["replicaModeMap"] is None
    for kind in ("Engine", "Replica"):
        assert all("conditions" in obj["status"] for obj in held[kind]), f"{kind} status.conditions"
    assert not any(
        im.get("status", {}).get(key) == {}
        for im in held["InstanceManager"]
        for key in ("instanceEngines", "instanceReplicas")
    ), "an IM without instances leaves its omitempty maps out"
    conditions = [
        c for objs in held.values() for obj in objs for c in obj.get("status", {}).get("conditions") or []
    ]
    assert conditions and all(set(c) >= set(CONDITION_KEYS) for c in conditions)
    assert all(c["lastProbeTime"] == "" for c in conditions)
    assert all(isinstance(v["spec"]["size"], str) for v in held["Volume"])
